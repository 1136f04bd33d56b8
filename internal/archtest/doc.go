// Package archtest holds a test that keeps imports where the project's
// layering puts them. Data flows one way: adb finds devices and opens byte
// streams, jdwp frames packets on a stream, ddms gives DDM chunks their
// meaning, alloctrack turns reports into records, windows and counts, and
// exporter shows the counts; cmd only wires them together. So jdwp and ddms
// know nothing of adb, logging or metrics; alloctrack imports neither
// Prometheus nor gadb; adb is the only user of gadb and knows nothing of
// alloctrack; exporter never reaches a device; and the simulator (sim) is
// built from the client's codecs without the adb client or the exporter.
// The test reads `go list -deps`, the way a depguard lint rule would.
package archtest
