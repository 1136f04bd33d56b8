package offline

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// BaselineKey is what a baseline's runs share: the device model, its API
// level, the app and the app's version. Runs of different keys are never
// compared.
type BaselineKey struct {
	Model          string `json:"model"`
	API            int    `json:"api"`
	Package        string `json:"package"`
	AppVersion     string `json:"app_version"`
	AppVersionCode int64  `json:"app_version_code"`
}

func (k BaselineKey) String() string {
	m := CaptureMeta{AppVersion: k.AppVersion, AppVersionCode: k.AppVersionCode}
	return fmt.Sprintf("%s, API %d, %s %s", k.Model, k.API, k.Package, m.AppVersionString())
}

// dir is the key's directory name in a store: readable, and safe on
// every file system.
func (k BaselineKey) dir() string {
	clean := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
				return r
			}
			return '_'
		}, s)
	}
	return fmt.Sprintf("%s_api%d_%s_%s_%d", clean(k.Model), k.API, clean(k.Package), clean(k.AppVersion), k.AppVersionCode)
}

// Differs names the fields where k and o differ ("device model Pixel 7 ≠
// Pixel 8"), or nil when they are the same key.
func (k BaselineKey) Differs(o BaselineKey) []string {
	var out []string
	add := func(what string, a, b any) {
		if a != b {
			out = append(out, fmt.Sprintf("%s %v ≠ %v", what, a, b))
		}
	}
	add("device model", k.Model, o.Model)
	add("API level", k.API, o.API)
	add("app", k.Package, o.Package)
	add("app version", k.AppVersion, o.AppVersion)
	add("app version code", k.AppVersionCode, o.AppVersionCode)
	return out
}

// ErrBaseline wraps every baseline store error; ErrBaselineMismatch is
// also wrapped when a run's key is not the baseline's.
var (
	ErrBaseline         = errors.New("baseline")
	ErrBaselineMismatch = errors.New("the baseline is of another device or app")
)

// RunKey reads a run's key from its summary.json (run: a capture or test
// run directory). A run that does not record all of it is an error naming
// what is missing.
func RunKey(run string) (BaselineKey, error) {
	k, err := recordedKey(run)
	if err != nil {
		return k, err
	}
	return k, completeKey(run, k)
}

// recordedKey is what a run's summary.json records of its key.
func recordedKey(run string) (BaselineKey, error) {
	b, err := os.ReadFile(filepath.Join(run, "summary.json"))
	if err != nil {
		return BaselineKey{}, fmt.Errorf("%w: %s: a baseline run is a capture directory with its summary.json: %v", ErrBaseline, run, err)
	}
	var s Summary
	if err := json.Unmarshal(b, &s); err != nil {
		return BaselineKey{}, fmt.Errorf("%w: %s: summary.json: %v", ErrBaseline, run, err)
	}
	return BaselineKey{Model: s.Model, API: s.API, Package: s.Package, AppVersion: s.AppVersion, AppVersionCode: s.AppVersionCode}, nil
}

// completeKey says which part of k is missing, if any.
func completeKey(run string, k BaselineKey) error {
	var missing []string
	for _, f := range []struct {
		what string
		none bool
	}{{"model", k.Model == ""}, {"api", k.API == 0}, {"package", k.Package == ""}, {"app_version", k.AppVersion == "" && k.AppVersionCode == 0}} {
		if f.none {
			missing = append(missing, f.what)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s: summary.json records no %s, so the run's device or app is unknown", ErrBaseline, run, strings.Join(missing, ", "))
	}
	return nil
}

// BaselineSet is one key's runs in a store, oldest first.
type BaselineSet struct {
	Key  BaselineKey
	Runs []string // directories in the store
}

const keyFile = "key.json"

// ListBaselines lists a store's keys (by directory name) and their runs.
func ListBaselines(store string) ([]BaselineSet, error) {
	ents, err := os.ReadDir(store)
	if err != nil {
		return nil, fmt.Errorf("%w: store %s: %v", ErrBaseline, store, err)
	}
	var out []BaselineSet
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		set, err := readSet(filepath.Join(store, e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, set)
	}
	return out, nil
}

// readSet reads one key directory of a store.
func readSet(dir string) (BaselineSet, error) {
	var set BaselineSet
	b, err := os.ReadFile(filepath.Join(dir, keyFile))
	if err == nil {
		err = json.Unmarshal(b, &set.Key)
	}
	if err != nil {
		return set, fmt.Errorf("%w: %s is not a baseline of the store: %v", ErrBaseline, dir, err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return set, fmt.Errorf("%w: %v", ErrBaseline, err)
	}
	for _, e := range ents { // sequence numbers, zero-padded: sorted by age
		if _, err := strconv.Atoi(e.Name()); e.IsDir() && err == nil {
			set.Runs = append(set.Runs, filepath.Join(dir, e.Name()))
		}
	}
	return set, nil
}

// AddBaseline copies run into store under its key, as the key's newest
// run (a run that holds less than a whole run is refused), then removes the key's oldest runs beyond keep. It returns where
// the run went and what was pruned. A run is copied into a hidden
// directory and renamed into place, so a reader never sees half a run.
func AddBaseline(store string, keep int, run string) (added string, pruned []string, err error) {
	k, err := RunKey(run)
	if err != nil {
		return "", nil, err
	}
	return addBaseline(store, keep, run, k)
}

// addBaseline is AddBaseline of run under key k.
func addBaseline(store string, keep int, run string, k BaselineKey) (added string, pruned []string, err error) {
	if keep < 1 {
		return "", nil, fmt.Errorf("%w: --keep %d: keep at least 1 run", ErrBaseline, keep)
	}
	if _, err := readRelRun(run); err != nil {
		return "", nil, fmt.Errorf("%w: %s is not put in the baseline: %v", ErrBaseline, run, err)
	}
	dir := filepath.Join(store, k.dir())
	if err := writeKey(dir, k); err != nil {
		return "", nil, err
	}
	tmp, err := os.MkdirTemp(dir, ".adding-")
	if err != nil {
		return "", nil, fmt.Errorf("%w: %v", ErrBaseline, err)
	}
	defer os.RemoveAll(tmp)
	if err := copyDir(run, tmp); err != nil {
		return "", nil, fmt.Errorf("%w: copying %s: %v", ErrBaseline, run, err)
	}
	if added, err = renameNext(dir, tmp); err != nil {
		return "", nil, err
	}
	set, err := readSet(dir)
	if err != nil {
		return added, nil, err
	}
	for _, old := range set.Runs[:max(0, len(set.Runs)-keep)] {
		if err := os.RemoveAll(old); err != nil {
			return added, pruned, fmt.Errorf("%w: pruning: %v", ErrBaseline, err)
		}
		pruned = append(pruned, old)
	}
	return added, pruned, nil
}

// writeKey creates a key's directory with its key.json; one that exists
// must hold the same key.
func writeKey(dir string, k BaselineKey) error {
	if set, err := readSet(dir); err == nil {
		if d := set.Key.Differs(k); d != nil {
			return fmt.Errorf("%w: %s holds another key (%s)", ErrBaseline, dir, strings.Join(d, ", "))
		}
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%w: %v", ErrBaseline, err)
	}
	b, _ := json.MarshalIndent(k, "", "  ")
	if err := WriteFileAtomic(filepath.Join(dir, keyFile), append(b, '\n')); err != nil {
		return fmt.Errorf("%w: %v", ErrBaseline, err)
	}
	return nil
}

// renameNext renames tmp to the key directory's next sequence number; a
// number another writer took first is skipped.
func renameNext(dir, tmp string) (string, error) {
	set, err := readSet(dir)
	if err != nil {
		return "", err
	}
	next := 1
	if n := len(set.Runs); n > 0 {
		next, _ = strconv.Atoi(filepath.Base(set.Runs[n-1]))
		next++
	}
	for range 100 {
		to := filepath.Join(dir, fmt.Sprintf("%06d", next))
		if err := os.Mkdir(to, 0o755); err == nil {
			if err := os.Remove(to); err == nil && os.Rename(tmp, to) == nil {
				return to, nil
			}
		}
		next++
	}
	return "", fmt.Errorf("%w: %s: no free sequence number after %d", ErrBaseline, dir, next)
}

// copyDir copies the regular files of src, and its directories, to dst.
func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case !d.Type().IsRegular():
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
}

// BaselineFor returns the runs of the store's baseline for key. When the
// store holds none, the error wraps ErrBaselineMismatch and names, for
// the store's nearest keys, what differs: never another key's runs.
func BaselineFor(store string, key BaselineKey) ([]string, error) {
	sets, err := ListBaselines(store)
	if err != nil {
		return nil, err
	}
	var near []string
	for _, s := range sets {
		d := s.Key.Differs(key)
		if d == nil && len(s.Runs) > 0 {
			return s.Runs, nil
		}
		if d != nil {
			near = append(near, fmt.Sprintf("%s (%s)", s.Key, strings.Join(d, ", ")))
		}
	}
	slices.Sort(near)
	if len(near) == 0 {
		return nil, fmt.Errorf("%w: %w: store %s holds no run of %s, nor of any other key", ErrBaseline, ErrBaselineMismatch, store, key)
	}
	return nil, fmt.Errorf("%w: %w: store %s holds no run of %s; it holds: %s", ErrBaseline, ErrBaselineMismatch, store, key, strings.Join(near, "; "))
}
