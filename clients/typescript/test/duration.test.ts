import assert from "node:assert/strict";
import { test } from "node:test";
import { formatDuration, parseDuration } from "../src/index.js";

test("durations: Go duration strings and milliseconds", () => {
  for (const [s, ms] of [["0s", 0], ["250ms", 250], ["1.5s", 1500], ["1m30s", 90_000], ["1h0m0s", 3_600_000], ["28.972362s", 28_972.362], ["1µs", 0.001], ["500us", 0.5], ["2ns", 2e-6], ["-1s", -1000]] as const) {
    assert.ok(Math.abs(parseDuration(s) - ms) < 1e-9, `${s}: ${parseDuration(s)}`);
  }
  assert.equal(parseDuration(undefined), 0);
  assert.equal(formatDuration(1500), "1500ms");
  assert.equal(formatDuration(0.5), "500000ns");
  assert.equal(formatDuration("30s"), "30s");
  assert.throws(() => formatDuration(-1), RangeError);
  assert.throws(() => formatDuration("30 seconds"), RangeError);
});
