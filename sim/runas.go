package sim

import "fmt"

// apiRunAsCpp is the first API level whose run-as is run-as.cpp, with
// error(3) texts and status 1; before (Android 7.1 and older) run-as.c
// exits with -errno (docs/doctor.md).
const apiRunAsCpp = 26

// statusENOENT is run-as.c's exit status for an unknown package: its
// panic() exits with -errno, and get_package_info sets ENOENT (2).
const statusENOENT = 256 - 2

// runAs runs "run-as PKG CMD..." as Android's run-as does as far as
// doctor needs (docs/doctor.md): a package that is not installed, or not
// debuggable, is refused on stderr with run-as's own text (run-as.c up
// to Android 7.1, run-as.cpp from 8.0); for a debuggable one the command
// runs ("true" alone succeeds). A package is installed here when one of
// its processes runs.
func (d *Device) runAs(f []string, in *shellInput) (out, errOut []byte, code int) {
	if len(f) < 2 {
		return nil, []byte("run-as: usage: run-as <package-name> [--user <uid>] <command> [<args>]\n"), 1
	}
	pkg, installed, debuggable := f[1], false, false
	for _, vm := range d.VMs() {
		if vm.ProcessName() == pkg {
			installed, debuggable = true, !vm.cfg.NotDebuggable
		}
	}
	d.mu.Lock()
	for _, name := range d.procs {
		installed = installed || name == pkg
	}
	d.mu.Unlock()
	old := d.cfg.API < apiRunAsCpp
	switch {
	case !installed && old:
		return nil, fmt.Appendf(nil, "run-as: Package '%s' is unknown\n", pkg), statusENOENT
	case !installed:
		return nil, fmt.Appendf(nil, "run-as: unknown package: %s\n", pkg), 1
	case !debuggable && old:
		return nil, fmt.Appendf(nil, "run-as: Package '%s' is not debuggable\n", pkg), 1
	case !debuggable:
		return nil, fmt.Appendf(nil, "run-as: package not debuggable: %s\n", pkg), 1
	case len(f) == 3 && f[2] == "true":
		return nil, nil, 0
	case len(f) == 2:
		return nil, nil, 0 // an interactive shell that reads nothing
	}
	return d.runCommandIO(f[2:], in)
}
