// Package adb talks to an adb server (docs/protocol.md at the repository
// root, section 2).
//
// It has its own smart-socket client for every exchange: host:version,
// host:devices-l, host:track-devices, host-serial:<serial>:features, and
// host:transport:<serial> followed by shell:, shell,v2,raw: (Exec; Run
// takes it where the device lists shell_v2, and shell: with the exit
// status echoed after the command where not, as before Android 7.0),
// sync: (Stat, Pull), track-jdwp,
// track-app (Android 12+, docs/track-app.md) or jdwp:<pid>, handing the raw
// JDWP stream to the caller. Every length a server or device sends is
// checked before it sizes anything, every read is bounded (by the
// framing, or by MaxShellOutput and MaxExecOutput where the reply has no
// length) and grows only as bytes arrive, and every call takes a context
// that bounds dialing and reading: when it ends, the read stops and the
// connection is closed. No goroutine of the package reads from a peer.
//
// github.com/electricbubble/gadb, which the package used for device
// details and shell commands, stays its reference client in tests (its
// replies from the simulator must agree with this package's) but reads
// nothing from a real server: it parses a length with its sign (OKAY-001
// made a slice of capacity -1, a panic in a goroutine nothing recovered),
// reads a shell: reply whole, has no context, and goes on reading for 60 s
// after its caller gave up (docs/protocol.md, section 2). adb/adbtest is a
// fake server with hostile replies for tests.
//
// FAIL replies become *FailError, with sentinels for the reasons callers
// branch on.
package adb
