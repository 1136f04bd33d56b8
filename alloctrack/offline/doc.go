// Package offline is what runs without a daemon: capture directories
// (CaptureWriter, each window's report or the raw trace, summary.json,
// profile.pb.gz), reading them back and bare report and trace files
// (ReadInput), allocation budgets a CI run can fail (Budget), and diffs of
// two runs (Compare).
package offline
