// Package accuracy measures how closely each of sluice's six algorithms
// follows an exact sliding-window limit. It generates seeded traffic traces
// (steady Poisson clients, on/off bursts, attackers timing bursts at window
// boundaries, many clients with heavy-tailed rates), replays each trace
// against the real in-memory store (core/memorystore on a simulated clock)
// and against an exact sliding log, and reports, per trace and algorithm:
//
//   - the most requests of one client admitted within any true sliding
//     window of length Period, divided by Rate;
//   - the share of requests wrongly allowed and wrongly denied: the
//     algorithm's decision compared with the decision an exact sliding log
//     of Rate per Period would make given the requests the algorithm itself
//     admitted so far (denied requests do not count, as in sluice);
//   - for the sliding window counter, the mean relative difference between
//     its weighted estimate and the true count of the window, and (CountAll)
//     the same estimate when every request counts, as in Cloudflare's study.
//
// cmd/accuracy prints the results as Markdown, writes an SVG chart and
// refreshes the generated part of docs/algorithms.md.
package accuracy
