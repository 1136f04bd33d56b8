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

// Kind decides whether an app is debuggable, profileable or neither, and
// says from which source. ta is nil where track-app was not asked (below
// Android 12) or failed.
func Kind(d Device, inJDWP bool, ta *TrackApp) (kind, source string) {
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
	case d.ReleaseJDWP():
		return KindUnknown, "every app is in the JDWP list on this build, debuggable or not"
	case inJDWP:
		return KindDebuggable, "in the JDWP list, which on this build holds only debuggable apps"
	}
	return KindNeither, "not in the JDWP list, which on this build holds every debuggable app (profileable is not asked before Android 12)"
}
