// Package apk reads what an APK file says of its app: the package,
// versionCode and versionName of its binary AndroidManifest.xml
// (docs/gates.md, "The app's version from an APK"). Binary XML is decoded
// by github.com/shogo82148/androidbinary; this package checks, before
// that, that the manifest declares nothing larger than it holds.
package apk

import (
	"archive/zip"
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/shogo82148/androidbinary"
)

// Version is what a manifest element says of its app.
type Version struct {
	Package string
	Name    string // android:versionName; "" when the manifest has none
	// Code is the long version code, as the package manager reports it:
	// android:versionCodeMajor in the high 32 bits, android:versionCode
	// in the low ones.
	Code int64
}

func (v Version) String() string {
	return fmt.Sprintf("%s %s (%d)", v.Package, v.Name, v.Code)
}

// Error is why a file is not an APK whose version can be read.
type Error struct {
	Path string
	What string // what was wrong
	Err  error  // the cause, if any
}

func (e *Error) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("apk: %s: %s", e.Path, e.What)
	}
	return fmt.Sprintf("apk: %s: %s: %v", e.Path, e.What, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// MaxManifest is the largest AndroidManifest.xml read, in bytes; the
// merged manifests of large apps are some hundred kilobytes.
const MaxManifest = 8 << 20

// ManifestName is the manifest's name in an APK.
const ManifestName = "AndroidManifest.xml"

// ReadVersion reads the app's version from the APK file at path.
func ReadVersion(path string) (Version, error) {
	f, err := os.Open(path)
	if err != nil {
		return Version{}, &Error{Path: path, What: "cannot open", Err: err}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Version{}, &Error{Path: path, What: "cannot open", Err: err}
	}
	zr, err := zip.NewReader(f, st.Size())
	if err != nil {
		return Version{}, &Error{Path: path, What: "not an APK (a zip archive)", Err: err}
	}
	b, err := readManifest(zr)
	if err != nil {
		return Version{}, &Error{Path: path, What: ManifestName, Err: err}
	}
	v, err := ManifestVersion(b)
	if err != nil {
		return Version{}, &Error{Path: path, What: ManifestName, Err: err}
	}
	return v, nil
}

// errNoManifest: the archive holds no AndroidManifest.xml.
var errNoManifest = errors.New("the archive holds none: not an APK")

// readManifest reads the manifest's bytes, at most MaxManifest of them.
func readManifest(zr *zip.Reader) ([]byte, error) {
	for _, f := range zr.File {
		if f.Name != ManifestName {
			continue
		}
		if f.UncompressedSize64 > MaxManifest {
			return nil, fmt.Errorf("%d bytes, more than the %d read", f.UncompressedSize64, MaxManifest)
		}
		rc, err := f.Open()
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		b, err := io.ReadAll(io.LimitReader(rc, MaxManifest+1))
		if err != nil {
			return nil, err
		}
		if len(b) > MaxManifest {
			return nil, fmt.Errorf("more than the %d bytes read", MaxManifest)
		}
		return b, nil
	}
	return nil, errNoManifest
}

// ManifestVersion reads the version from a binary AndroidManifest.xml:
// the package, android:versionCode, android:versionCodeMajor and
// android:versionName attributes of its first element, <manifest>.
func ManifestVersion(b []byte) (v Version, err error) {
	head, err := firstElement(b)
	if err != nil {
		return v, err
	}
	defer func() { // a decoder's panic on a corrupt file is an error here
		if r := recover(); r != nil {
			err = fmt.Errorf("corrupt binary XML (%v)", r)
		}
	}()
	xf, err := androidbinary.NewXMLFile(bytes.NewReader(head))
	if err != nil {
		return v, fmt.Errorf("corrupt binary XML: %w", err)
	}
	tok, err := firstStart(xml.NewDecoder(xf.Reader()))
	if err != nil {
		return v, err
	}
	return versionOf(tok)
}

// firstStart returns the first start element of the decoded text.
func firstStart(d *xml.Decoder) (xml.StartElement, error) {
	for {
		tok, err := d.Token()
		if err != nil {
			return xml.StartElement{}, fmt.Errorf("no element: %w", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			return se, nil
		}
	}
}
