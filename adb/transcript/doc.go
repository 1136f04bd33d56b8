// Package transcript records and reads what alloctrack says to the adb
// server and, through it, to each device: a transparent TCP proxy in front
// of the adb server (Record) writes every connection's host requests, the
// device service it opens, and the bytes each way with timestamps to a
// versioned, checksummed file; Read gives them back, refusing a truncated,
// edited or foreign file with where it went wrong. The simulator's replay
// device (sim.Replay) serves a transcript back through the real adb server.
//
// It sits on the codecs floor: it knows the adb smart-socket framing
// (docs/protocol.md, section 3) and the shell protocol v2 packets, and
// nothing of alloctrack, logging or metrics. See docs/doctor.md,
// "Recording and replaying".
package transcript
