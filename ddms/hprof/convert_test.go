package hprof_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/alloctrack/alloctrack/ddms/hprof"
	"github.com/alloctrack/alloctrack/internal/hproftest"
	"github.com/alloctrack/alloctrack/internal/realtest"
)

// hprofConv is Debian's hprof-conv, which installs it outside PATH.
func hprofConv(t *testing.T) string {
	return realtest.Program(t, "hprof-conv", "hprof-conv", "/usr/lib/android-sdk/platform-tools")
}

// TestConvertStandardAsHprofConv converts Android dumps with Android's own
// hprof-conv and with ConvertStandard, with and without -z: the outputs
// are equal byte for byte, and read back.
func TestConvertStandardAsHprofConv(t *testing.T) {
	t.Run("segments in memory", func(t *testing.T) { convertAsHprofConv(t) })
	t.Run("segments read twice", func(t *testing.T) {
		defer hprof.SetMaxBuffered(16)()
		convertAsHprofConv(t)
	})
}

func convertAsHprofConv(t *testing.T) {
	conv := hprofConv(t)
	dir := t.TempDir()
	for name, dump := range map[string][]byte{"android": hproftest.AndroidDump(), "leaky": hproftest.LeakyDump(), "many": hproftest.ManyObjects(30000)} {
		in := filepath.Join(dir, name+".hprof")
		os.WriteFile(in, dump, 0o644)
		for _, z := range []bool{false, true} {
			ref := filepath.Join(dir, name+"-ref.hprof")
			args := []string{in, ref}
			if z {
				args = append([]string{"-z"}, args...)
			}
			if out, err := exec.Command(conv, args...).CombinedOutput(); err != nil {
				t.Fatalf("hprof-conv %v: %v\n%s", args, err, out)
			}
			want, _ := os.ReadFile(ref)
			var got bytes.Buffer
			if err := hprof.ConvertStandard(bytes.NewReader(dump), &got, z); err != nil {
				t.Fatalf("%s (-z %v): %v", name, z, err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				i := 0
				for i < min(got.Len(), len(want)) && got.Bytes()[i] == want[i] {
					i++
				}
				t.Errorf("%s (-z %v): %d bytes, hprof-conv %d; first difference at %d", name, z, got.Len(), len(want), i)
				continue
			}
			if name == "android" {
				continue // its NODATA array stays without values, as hprof-conv leaves it
			}
			rd, err := hprof.NewReader(bytes.NewReader(got.Bytes()))
			if err == nil {
				err = rd.Walk(&hprof.Visitor{})
			}
			if err != nil || rd.Header().Version != "JAVA PROFILE 1.0.2" {
				t.Errorf("%s: the converted dump does not read back: %v", name, err)
			}
		}
	}
}

func TestConvertStandardErrors(t *testing.T) {
	var out bytes.Buffer
	for _, c := range []struct {
		in   []byte
		want string
	}{
		{[]byte("JAVA PROFILE 1.0.2\x00\x00\x00\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00"), "already in the standard"},
		{[]byte("HELLO\x00"), "not an Android"},
		{hproftest.LeakyDump()[:200], "truncated"},
	} {
		err := hprof.ConvertStandard(bytes.NewReader(c.in), &out, false)
		var fe *hprof.FormatError
		if !errors.As(err, &fe) || !bytes.Contains([]byte(err.Error()), []byte(c.want)) {
			t.Errorf("error %v, want a FormatError with %q", err, c.want)
		}
	}
}

func FuzzConvertStandard(f *testing.F) {
	f.Add(hproftest.AndroidDump())
	f.Add(hproftest.LeakyDump())
	f.Fuzz(func(t *testing.T, b []byte) {
		var out bytes.Buffer
		err := hprof.ConvertStandard(bytes.NewReader(b), &out, len(b)%2 == 0)
		var fe *hprof.FormatError
		if err != nil && !errors.As(err, &fe) {
			t.Fatalf("%T %v", err, err)
		}
	})
}
