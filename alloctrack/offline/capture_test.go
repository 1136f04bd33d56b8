package offline_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack/offline"
)

// TestWriteFileAtomicMode: capture files are artefacts a collector running
// as another user reads: 0644, not the 0600 of a temporary file.
func TestWriteFileAtomicMode(t *testing.T) {
	p := filepath.Join(t.TempDir(), "1.alloc")
	if err := offline.WriteFileAtomic(p, []byte("x")); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if m := st.Mode().Perm(); m != 0o644 {
		t.Errorf("mode %o, want 644", m)
	}
	if m, _ := filepath.Glob(filepath.Join(filepath.Dir(p), ".*")); len(m) != 0 {
		t.Errorf("temporary files left: %v", m)
	}
}
