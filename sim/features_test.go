package sim

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/internal/adbtest"
)

// TestAdbdFeaturesByVersion: each API level advertises what the real
// adbd of its release lists (docs/heapdumps.md, fact 2), and before 7.0
// no feature list at all.
func TestAdbdFeaturesByVersion(t *testing.T) {
	for _, c := range []struct {
		api  int
		want string
	}{
		{19, ""},
		{23, ""},
		{24, "shell_v2,cmd"},
		{25, "shell_v2,cmd"},
		{26, "shell_v2,cmd,stat_v2"},
		{28, "shell_v2,cmd,stat_v2"},
		{29, "shell_v2,cmd,stat_v2,apex,abb,abb_exec,fixed_push_symlink_timestamp"},
		{30, "shell_v2,cmd,stat_v2,apex,abb,abb_exec,fixed_push_symlink_timestamp,ls_v2,sendrecv_v2,sendrecv_v2_brotli"},
		{31, "shell_v2,cmd,stat_v2,apex,abb,abb_exec,fixed_push_symlink_timestamp,ls_v2,sendrecv_v2,sendrecv_v2_brotli,track_app"},
		{35, "shell_v2,cmd,stat_v2,apex,abb,abb_exec,fixed_push_symlink_timestamp,ls_v2,sendrecv_v2,sendrecv_v2_brotli,track_app"},
	} {
		d := NewDevice(DeviceConfig{Serial: "f", API: c.api, Product: "p", Model: "m"})
		if got := strings.Join(d.Features(), ","); got != c.want {
			t.Errorf("API %d: features %q, want %q", c.api, got, c.want)
		}
		banner := "device::ro.product.name=p;ro.product.model=m;ro.product.device=simulated"
		if c.want != "" {
			banner += ";features=" + c.want
		}
		if got := d.Banner(); got != banner {
			t.Errorf("API %d: banner %q, want %q", c.api, got, banner)
		}
	}
}

// TestShellV2RefusedBefore24: adbd before 7.0 knows only shell:; it
// closes the stream of shell,v2 at once (CLSE), as any unknown service.
func TestShellV2RefusedBefore24(t *testing.T) {
	for _, api := range []int{19, 21, 23} {
		d := NewDevice(DeviceConfig{Serial: "old", API: api})
		if c, err := d.OpenService("shell,v2,raw:echo hi"); !errors.Is(err, ErrRefused) {
			if c != nil {
				c.Close()
			}
			t.Errorf("API %d: shell,v2 opened (%v), want ErrRefused", api, err)
		}
		c, err := d.OpenService("shell:echo hi")
		if err != nil {
			t.Fatalf("API %d: shell: %v", api, err)
		}
		c.Close()
		d.Close()
	}
	p, _, _ := dialAdbdAPI(t, 23)
	p.send(cmdCNXN, adbVersion, 4096, "host::features=shell_v2,cmd\x00")
	p.expect(cmdCNXN, adbVersion, 4096, "device::ro.product.name=p;ro.product.model=m;ro.product.device=simulated")
	p.send(cmdOPEN, 7, 0, "shell,v2,raw:echo hi\x00")
	p.expect(cmdCLSE, 0, 7, "")
}

// TestAdbdOldShellThroughADB: Debian's adb server sees no feature on an
// Android 6 device and runs `adb shell` through shell:, whose pty ends
// lines in "\r\n"; `adb pull` and `adb ls` work on every version, with
// the v2 stat from 8.0 (stat_v2) and the v2 list from 11 (ls_v2).
func TestAdbdOldShellThroughADB(t *testing.T) {
	srv := adbtest.StartServer(t)
	r := newADBRig(t, srv, 23)
	if out, err := r.adb(t, "features"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("features on API 23: %q %v, want none", out, err)
	}
	if out, err := r.adb(t, "shell", "echo", "hi"); err != nil || out != "hi\r\n" {
		t.Errorf("adb shell echo hi on API 23: %q %v, want \"hi\\r\\n\"", out, err)
	}
	for _, api := range []int{23, 26, 30} {
		r := r
		if api != 23 {
			r = newADBRig(t, srv, api)
		}
		out, err := r.adb(t, "features")
		if err != nil || strings.Contains(out, "stat_v2") != (api >= 26) || strings.Contains(out, "ls_v2") != (api >= 30) {
			t.Errorf("features on API %d: %q %v", api, out, err)
		}
		r.d.PutFile("/data/local/tmp/x.bin", []byte("abc"))
		dst := filepath.Join(t.TempDir(), "x.bin")
		if out, err := r.adb(t, "pull", "/data/local/tmp/x.bin", dst); err != nil {
			t.Fatalf("pull on API %d: %q %v", api, out, err)
		}
		if b, _ := os.ReadFile(dst); string(b) != "abc" {
			t.Errorf("pull on API %d: %q", api, b)
		}
		if out, err := r.adb(t, "ls", "/data/local/tmp"); err != nil || !strings.Contains(out, "x.bin") {
			t.Errorf("ls on API %d: %q %v", api, out, err)
		}
		if !slices.Equal(r.d.Files("/data/local/tmp"), []string{"x.bin"}) {
			t.Errorf("API %d: files %v", api, r.d.Files("/data/local/tmp"))
		}
	}
}
