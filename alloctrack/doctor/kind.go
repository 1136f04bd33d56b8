package doctor

// TrackApp is what track-app (Android 12+) said of a process: Listed
// false means the device's list did not hold it.
type TrackApp struct {
	Listed, Debuggable, Profileable bool
}

// ReleaseJDWP reports whether the device's zygote gives every app JDWP,
// debuggable or not (docs/heapdumps.md fact 5): up to Android 13 on any
// ro.debuggable=1 build; from 14 on eng builds or with
// persist.debug.dalvik.vm.jdwp.enabled=1; from 15 on eng builds, or
// userdebug ones with that property.
func (d Device) ReleaseJDWP() bool {
	eng, prop := d.Build == "eng", d.JDWPProp == "1"
	switch {
	case d.API < APIJDWPProp:
		return d.roDebuggable()
	case d.API == APIJDWPProp:
		return eng || prop
	}
	return eng || (d.Build == "userdebug" && prop)
}

// RunAs is what `run-as PKG true` said: run-as runs commands only as a
// debuggable package (docs/doctor.md).
type RunAs int

const (
	RunAsNotAsked      RunAs = iota // not asked, or its answer says nothing
	RunAsDebuggable                 // it ran: the package is debuggable
	RunAsNotDebuggable              // it refused: not debuggable
)

// Kind decides whether an app is debuggable, profileable or neither, and
// says from which source. ta is nil where track-app was not asked (below
// Android 12) or failed; ra is what run-as said (below Android 12).
func Kind(d Device, inJDWP bool, ta *TrackApp, ra RunAs) (kind, source string) {
	if ta != nil {
		switch {
		case !ta.Listed:
			return KindNeither, "track-app does not list it"
		case ta.Debuggable:
			return KindDebuggable, "track-app"
		case ta.Profileable:
			return KindProfileable, "track-app"
		}
		return KindNeither, "track-app lists it with neither flag"
	}
	switch {
	case ra == RunAsDebuggable:
		return KindDebuggable, "run-as runs a command as it (only a debuggable package)"
	case ra == RunAsNotDebuggable && d.API < APIProfileable:
		return KindNeither, "run-as: not debuggable (profileable apps came with Android 10)"
	case ra == RunAsNotDebuggable:
		return KindNeither, "run-as: not debuggable (profileable is not asked before Android 12)"
	case d.ReleaseJDWP():
		return KindUnknown, "every app is in the JDWP list on this build, debuggable or not"
	case inJDWP:
		return KindDebuggable, "in the JDWP list, which on this build holds only debuggable apps"
	}
	return KindNeither, "not in the JDWP list, which on this build holds every debuggable app (profileable is not asked before Android 12)"
}

// APIProfileable is the first API level (Android 10) whose apps may be
// profileable (<profileable android:shell="true"/>).
const APIProfileable = 29
