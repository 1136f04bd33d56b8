package main

import (
	"runtime/debug"

	"github.com/prometheus/common/version"
)

// stampVersion fills the build facts that `-ldflags -X` did not set (make
// build and the Dockerfile set them from git) from the build information
// the Go toolchain embeds: the module version (a tag, or a pseudo-version
// ending in +dirty for a work tree with changes) and the VCS revision, time
// and modified flag that `go build` records. `go run` records them only with
// -buildvcs=true, as the README's command passes; without any of it the
// version is "devel" and the revision "unknown", rather than empty labels.
func stampVersion(bi *debug.BuildInfo, ok bool) {
	var rev, when string
	modified := false
	if ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if version.Version == "" {
		version.Version = "devel"
		if ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			version.Version = bi.Main.Version
		} else if modified {
			version.Version = "devel+dirty"
		}
	}
	if version.Revision == "" {
		switch {
		case rev == "":
			version.Revision = "unknown"
		case modified:
			version.Revision = rev + "-dirty"
		default:
			version.Revision = rev
		}
	}
	if version.Branch == "" {
		version.Branch = "unknown" // the toolchain does not record it
	}
	if version.BuildDate == "" && when != "" {
		version.BuildDate = when
	}
}

func init() {
	bi, ok := debug.ReadBuildInfo()
	stampVersion(bi, ok)
}
