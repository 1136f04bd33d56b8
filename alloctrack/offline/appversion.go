package offline

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// AppVersionSource is how a capture learnt its app's version.
const AppVersionSource = "dumpsys package"

// ParseDumpsysVersion reads the app's version from the output of
// `dumpsys package PKG`: the first versionName=S and versionCode=N of the
// package's section (docs/gates.md); versionName=null, an app without
// one, is "". An error says what was missing.
func ParseDumpsysVersion(pkg string, out []byte) (name string, code int64, err error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	haveCode, haveName := false, false
	for sc.Scan() {
		for _, f := range strings.Fields(sc.Text()) {
			k, v, ok := strings.Cut(f, "=")
			switch {
			case !ok:
			case k == "versionName" && !haveName:
				haveName = true
				if v != "null" {
					name = v
				}
			case k == "versionCode" && !haveCode:
				if code, err = strconv.ParseInt(v, 10, 64); err != nil {
					return "", 0, fmt.Errorf("dumpsys package %s: versionCode %q is not a number", pkg, v)
				}
				haveCode = true
			}
		}
	}
	if !haveName && !haveCode {
		first, _, _ := bytes.Cut(bytes.TrimSpace(out), []byte("\n"))
		return "", 0, fmt.Errorf("dumpsys package %s names no versionName or versionCode (it said %q)", pkg, first)
	}
	return name, code, nil
}

// AppVersionString is how a capture's app version reads: "1.4.2 (42)".
func (m CaptureMeta) AppVersionString() string {
	switch {
	case m.AppVersion == "" && m.AppVersionCode == 0:
		return ""
	case m.AppVersionCode == 0:
		return m.AppVersion
	}
	return fmt.Sprintf("%s (%d)", m.AppVersion, m.AppVersionCode)
}
