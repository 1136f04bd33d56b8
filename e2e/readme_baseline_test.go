package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/internal/adbtest"
	"github.com/alloctrack/alloctrack/internal/apktest"
	"github.com/alloctrack/alloctrack/sim"
)

// readmeAPK is where the README's recipe finds the APK its job built.
const readmeAPK = "app/build/outputs/apk/release/app-release.apk"

// readmeBaselineScript returns the README's gated CI job with a baseline
// (the block between the ci-baseline markers), on free ports, with the
// simulator's app as the job's APK.
func readmeBaselineScript(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	const open, end = "<!-- ci-baseline -->\n```sh\n", "```\n<!-- /ci-baseline -->"
	readme := string(b)
	i, j := strings.Index(readme, open), strings.Index(readme, end)
	if i < 0 || j < i {
		t.Fatal("README.md has no ci-baseline block")
	}
	script := readme[i+len(open) : j]
	if !strings.Contains(script, readmeAPK) {
		t.Fatalf("the README's recipe names no %s; update this test:\n%s", readmeAPK, script)
	}
	apk := apktest.Write(t, "app-release.apk", apktest.Manifest{Package: "com.example.app1", VersionName: sim.DefaultAppVersion.Name, VersionCode: uint32(sim.DefaultAppVersion.Code)})
	script = strings.ReplaceAll(script, readmeAPK, apk)
	script = strings.ReplaceAll(script, "15037", strconv.Itoa(adbtest.FreePort(t)))
	return strings.ReplaceAll(script, "15038", strconv.Itoa(adbtest.FreePort(t)))
}

// TestReadmeBaselineExample runs the README's baseline recipe as it
// stands: the same build on both sides passes, each test judged; with a
// new build that allocates about twice as much, the job fails with exit 3
// naming the breaches with their intervals; with an APK of another version
// than the device's, the first run is refused (exit 1).
func TestReadmeBaselineExample(t *testing.T) {
	script := readmeBaselineScript(t)
	dir, out, err := runCIScript(t, script)
	if err != nil {
		t.Fatalf("the README's baseline example failed: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "store")); err != nil {
		t.Errorf("no store: %v", err)
	}
	if !strings.Contains(out, "relative: 0 breaches in 10 comparisons of 5 baseline and 5 new runs") || !strings.Contains(out, "com.example.app1 1.0 (1)") {
		t.Errorf("the check did not judge the 5 tests against the baseline of the app's version:\n%s", out)
	}
	add := `alloctrack baseline add --store store/ --keep 10 --apk "$APK" base*/`
	if !strings.Contains(script, add) {
		t.Fatalf("the README's add line changed; update this test:\n%s", script)
	}
	curl := script[strings.Index(script, "curl "):]
	curl = curl[:strings.IndexByte(curl, '\n')]
	bigger := strings.Replace(curl, `"tests":5`, `"tests":5,"allocations":400`, 1)
	_, out, err = runCIScript(t, strings.Replace(script, add, add+"\n"+bigger, 1))
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Fatalf("a build allocating twice as much: exit %v, want 3:\n%s", err, out)
	}
	if !strings.Contains(out, ": BREACH") || !strings.Contains(out, "(interval ×") {
		t.Errorf("the breaches are not named with their intervals:\n%s", out)
	}
	other := apktest.Write(t, "app-release.apk", apktest.Manifest{Package: "com.example.app1", VersionName: "1.1", VersionCode: 2})
	i := strings.Index(script, "APK=") + len("APK=")
	j := i + strings.IndexAny(script[i:], " \n")
	_, out, err = runCIScript(t, script[:i]+other+script[j:])
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(out, "installed ≠ APK: app version 1.0 ≠ 1.1") {
		t.Errorf("an APK the device does not have installed: exit %v, want 1 saying what differs:\n%s", err, out)
	}
}
