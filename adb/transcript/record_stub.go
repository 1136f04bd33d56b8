// Package transcript records the conversation between alloctrack and an
// adb server. This file is a stand-in for the record/replay helper's
// package (issue 36, branch replay): Record here only says it is not
// built, so that doctor's --record compiles; the real proxy replaces it.
package transcript

import (
	"errors"
	"io"
)

// Options of a recording.
type Options struct {
	// Anonymize replaces serials and package names consistently.
	Anonymize bool
}

// Record would listen on 127.0.0.1:0, forward every connection to the
// adb server at upstream and write each one's bytes each way, with
// timestamps, to w. Not built yet.
func Record(upstream string, w io.Writer, opts Options) (addr string, stop func() error, err error) {
	return "", nil, errors.New("transcript: recording is not built yet")
}
