package perfetto_test

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/internal/realtest"
)

var update = flag.Bool("update", false, "re-encode testdata/*.pb from the text protos with protoc")

// fixtures are the text-proto traces in testdata. Each is committed in two
// encodings: NAME.pb as protoc writes it from testdata/heapprofd.proto
// (repeated ids unpacked, as proto2 does by default) and NAME.packed.pb from
// the same schema with those fields declared [packed = true].
var fixtures = []string{
	"new_stack",
	"two_heaps",
	"android10_dump_max",
	"android10_dump_max_legacy",
	"android10_window",
	"art_heapprofd",
	"lost_state",
	"writer_small",
	"empty_callstack",
}

func fixture(t testing.TB, name string, packed bool) []byte {
	t.Helper()
	p := filepath.Join("testdata", name+".pb")
	if packed {
		p = filepath.Join("testdata", name+".packed.pb")
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// protocEncode encodes testdata/NAME.textproto with protoc.
func protocEncode(t *testing.T, protoc, name string, packed bool) []byte {
	t.Helper()
	schema, err := os.ReadFile(filepath.Join("testdata", "heapprofd.proto"))
	if err != nil {
		t.Fatal(err)
	}
	if packed {
		schema = bytes.ReplaceAll(schema, []byte("/*packable*/"), []byte("[packed = true]"))
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "heapprofd.proto"), schema, 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(filepath.Join("testdata", name+".textproto"))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	cmd := exec.Command(protoc, "--proto_path="+dir, "--encode=alloctrack.perfettotest.Trace", "heapprofd.proto")
	cmd.Stdin = in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("protoc --encode %s: %v\n%s", name, err, stderr.String())
	}
	return out
}

// TestFixturesMatchProtoc re-encodes every text proto with protoc and
// checks the committed .pb files are what it writes (with -update, writes
// them). Needs protoc (Debian package protobuf-compiler); never skips when
// CI is set.
func TestFixturesMatchProtoc(t *testing.T) {
	protoc := realtest.Program(t, "protoc", "protobuf-compiler")
	if !strings.Contains(string(must(os.ReadFile(filepath.Join("testdata", "heapprofd.proto")))), "/*packable*/") {
		t.Fatal("heapprofd.proto lost its /*packable*/ markers")
	}
	for _, name := range fixtures {
		for _, packed := range []bool{false, true} {
			got := protocEncode(t, protoc, name, packed)
			p := filepath.Join("testdata", name+".pb")
			if packed {
				p = filepath.Join("testdata", name+".packed.pb")
			}
			if *update {
				if err := os.WriteFile(p, got, 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want, err := os.ReadFile(p)
			if err != nil {
				t.Fatalf("%v (run go test -run TestFixturesMatchProtoc -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from protoc's encoding of %s.textproto (run go test -run TestFixturesMatchProtoc -update)", p, name)
			}
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
