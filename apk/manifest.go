package apk

import (
	"encoding/xml"
	"errors"
	"fmt"
	"regexp"
	"strconv"
)

// AndroidNS is the namespace of android: attributes.
const AndroidNS = "http://schemas.android.com/apk/res/android"

// resRef is how the decoder writes a value that is a resource reference.
var resRef = regexp.MustCompile(`^@0x[0-9A-Fa-f]{8}$`)

// versionOf reads the version from the manifest element se.
func versionOf(se xml.StartElement) (Version, error) {
	var v Version
	if se.Name.Local != "manifest" {
		return v, fmt.Errorf("the first element is <%s>, not <manifest>", se.Name.Local)
	}
	var code, major string
	for _, a := range se.Attr {
		switch {
		case a.Name.Space == "" && a.Name.Local == "package":
			v.Package = a.Value
		case a.Name.Space != AndroidNS:
		case a.Name.Local == "versionCode":
			code = a.Value
		case a.Name.Local == "versionCodeMajor":
			major = a.Value
		case a.Name.Local == "versionName":
			v.Name = a.Value
		}
	}
	if v.Package == "" {
		return v, errors.New("<manifest> names no package")
	}
	if resRef.MatchString(v.Name) {
		return v, fmt.Errorf("android:versionName is the resource %s, which is not looked up", v.Name)
	}
	lo, err := versionInt("versionCode", code)
	if err != nil {
		return v, err
	}
	hi, err := versionInt("versionCodeMajor", major)
	if err != nil {
		return v, err
	}
	if code == "" && v.Name == "" {
		return v, fmt.Errorf("<manifest> of %s has no android:versionCode or android:versionName", v.Package)
	}
	v.Code = int64(uint64(hi)<<32 | uint64(lo))
	return v, nil
}

// versionInt reads a 32-bit version attribute as the decoder wrote it
// (decimal, or 0x… hexadecimal); "" is 0.
func versionInt(attr, s string) (uint32, error) {
	if s == "" {
		return 0, nil
	}
	if resRef.MatchString(s) {
		return 0, fmt.Errorf("android:%s is the resource %s, which is not looked up", attr, s)
	}
	n, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		return 0, fmt.Errorf("android:%s %q is not a 32-bit number", attr, s)
	}
	return uint32(n), nil
}
