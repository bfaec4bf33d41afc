// Writes the OpenAPI document a real tenure serve serves to the file named
// by the first argument.
import { writeFileSync } from "node:fs";
import { startServe } from "./serve.js";

const out = process.argv[2];
if (!out) {
  console.error("usage: node build/tools/openapi.js FILE");
  process.exit(2);
}
const s = await startServe();
try {
  const r = await fetch(s.url + "/v1/openapi.json");
  if (r.status !== 200) throw new Error(`GET /v1/openapi.json: ${r.status}`);
  writeFileSync(out, await r.text());
} finally {
  await s.stop();
}
