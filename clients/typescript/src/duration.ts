/**
 * Durations. The API writes them as Go duration strings ("250ms", "1m30s");
 * this client takes and gives milliseconds.
 */

/** A duration: milliseconds, or a Go duration string such as "30s" or "1m30s". */
export type Duration = number | string;

const units: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  "µs": 1e-3,
  "μs": 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};

/** Returns d as a Go duration string ("1500ms"). Negative or non-finite numbers are refused. */
export function formatDuration(d: Duration): string {
  if (typeof d === "string") {
    parseDuration(d); // refuse what the server would not read
    return d;
  }
  if (!Number.isFinite(d) || d < 0) {
    throw new RangeError(`tenure: duration ${d} ms is not a finite number of milliseconds >= 0`);
  }
  if (Number.isInteger(d)) return `${d}ms`;
  return `${Math.round(d * 1e6)}ns`;
}

/** Returns the milliseconds of a duration (a Go duration string, or a number of milliseconds). */
export function parseDuration(d: Duration | undefined | null): number {
  if (d === undefined || d === null || d === "") return 0;
  if (typeof d === "number") return d;
  let s = d;
  let sign = 1;
  if (s[0] === "-" || s[0] === "+") {
    if (s[0] === "-") sign = -1;
    s = s.slice(1);
  }
  if (s === "0") return 0;
  const re = /^(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)/;
  let total = 0;
  if (s === "") throw new RangeError(`tenure: duration ${JSON.stringify(d)} does not parse`);
  while (s !== "") {
    const m = re.exec(s);
    if (!m) throw new RangeError(`tenure: duration ${JSON.stringify(d)} does not parse`);
    total += Number(m[1]) * units[m[2]!]!;
    s = s.slice(m[0].length);
  }
  return sign * total;
}
