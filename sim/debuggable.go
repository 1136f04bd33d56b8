package sim

// Who has JDWP and who may be dumped, by build type and Android version
// (docs/heapdumps.md, "What each Android version does", facts 4 and 5).
// An app is debuggable (AppConfig.NotDebuggable false), profileable only
// (NotDebuggable and Profileable) or built for release (NotDebuggable
// alone).

// Build types (DeviceConfig.Build, ro.build.type).
const (
	BuildUser      = "user"
	BuildUserdebug = "userdebug"
	BuildEng       = "eng"
)

// PropJDWPEnabled is the property that, from Android 14, gives apps that
// are not debuggable JDWP on a debuggable build (Zygote.java).
const PropJDWPEnabled = "persist.debug.dalvik.vm.jdwp.enabled"

// API levels of the JDWP rule's changes (fact 5).
const (
	apiJDWPProp          = 34 // 14: eng, or the property
	apiJDWPPropUserdebug = 35 // 15: eng, or userdebug and the property
)

// debuggableProp is ro.debuggable of a build type.
func debuggableProp(build string) string {
	if build == BuildUser {
		return "0"
	}
	return "1"
}

// releaseJDWP reports whether the device's zygote gives every app JDWP,
// debuggable or not (fact 5): up to Android 13 on any ro.debuggable=1
// build; on 14 on eng builds or with PropJDWPEnabled=1; from 15 on eng
// builds, or userdebug ones with PropJDWPEnabled=1.
func (d *Device) releaseJDWP() bool {
	p := d.Props()
	eng, prop := p["ro.build.type"] == BuildEng, p[PropJDWPEnabled] == "1"
	switch {
	case d.cfg.API < apiJDWPProp:
		return p["ro.debuggable"] == "1"
	case d.cfg.API < apiJDWPPropUserdebug:
		return eng || prop
	default:
		return eng || (p["ro.build.type"] == BuildUserdebug && prop)
	}
}

// hasJDWP reports whether vm is in the JDWP list (track-jdwp) and takes
// jdwp:<pid>.
func (d *Device) hasJDWP(vm *VM) bool {
	return !vm.cfg.NotDebuggable || d.releaseJDWP()
}

// mayDumpHeap reports whether am dumpheap dumps vm (fact 4): a
// debuggable app, or any app on a ro.debuggable=1 build. The JDWP list
// does not matter.
func (d *Device) mayDumpHeap(vm *VM) bool {
	return !vm.cfg.NotDebuggable || d.Props()["ro.debuggable"] == "1"
}
