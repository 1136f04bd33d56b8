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
// `dumpsys package PKG`: the first versionName=S line (S the rest of the
// line, which may hold spaces; "null" means none) and the first
// versionCode=N of the package's section (docs/gates.md). An error says
// what was missing.
func ParseDumpsysVersion(pkg string, out []byte) (name string, code int64, err error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	haveCode := false
	haveName := false
	for sc.Scan() {
		line := strings.TrimRight(strings.TrimLeft(sc.Text(), " \t"), "\r")
		if v, ok := strings.CutPrefix(line, "versionName="); ok && !haveName {
			// The whole rest of the line; "null" when the manifest has none.
			name, haveName = v, true
			if v == "null" {
				name = ""
			}
			continue
		}
		for _, f := range strings.Fields(line) {
			k, v, ok := strings.Cut(f, "=")
			switch {
			case !ok:
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
