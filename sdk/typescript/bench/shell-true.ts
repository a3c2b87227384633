// Latency of `shell true` through the TypeScript client: one session, calls in
// turn, p50 and p90 and every call's time in milliseconds as one JSON line
// (for make bench: bench/typescript.py).
//   node build/bench/shell-true.js [calls]   (target: TOOLRT_TARGET)
import { Client } from "../src/index.js";

const calls = Number(process.argv[2] ?? 200);
const WARMUP = 20;

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? NaN;

await using client = new Client();
await using session = await client.session();
const took: number[] = [];
for (let i = 0; i < WARMUP + calls; i++) {
  const start = process.hrtime.bigint();
  const result = await session.shell("true");
  if (!result.ok) throw new Error(`shell true failed: ${result.error.code} ${result.error.message}`);
  if (i >= WARMUP) took.push(Number(process.hrtime.bigint() - start) / 1e6);
}
const sorted = [...took].sort((a, b) => a - b);
console.log(
  JSON.stringify({
    client: "typescript",
    calls,
    p50_ms: percentile(sorted, 0.5),
    p90_ms: percentile(sorted, 0.9),
    times_ms: took,
  }),
);
