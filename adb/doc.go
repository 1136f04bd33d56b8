// Package adb talks to an adb server (docs/protocol.md at the repository
// root, section 2).
//
// It is the project's only user of github.com/electricbubble/gadb, which it
// uses for device details and shell commands, and it has its own small
// smart-socket client for what gadb cannot do: host:track-devices, and
// host:transport:<serial> followed by track-jdwp, track-app (Android 12+,
// docs/track-app.md) or jdwp:<pid>, handing the raw JDWP stream to the
// caller. Every call takes a context that bounds dialing and reading. FAIL
// replies become *FailError, with sentinels for the reasons callers branch
// on.
package adb
