package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/alloctrack/alloctrack/internal/xsrf"
)

// HeapDumps lets the web view take heap dumps of apps and serve them:
// POST /api/v1/apps/{serial}/{package}/heapdump (with the header
// X-Alloctrack-Request: heapdump, which a form on another site cannot
// send; ?gc=1 to collect garbage first) takes one and answers its
// summary; GET /api/v1/heapdumps/{id}/{heap.hprof,summary.json} serves
// its files. A dump freezes the app while it is written: nothing takes
// one but a request.
type HeapDumps struct {
	// Dir holds each dump's capture directory, named by its id.
	Dir string
	// Take dumps the app and returns the id of its capture directory. It
	// returns an error wrapping ErrNoApp or ErrDumpBusy for those cases.
	Take func(ctx context.Context, serial, pkg string, gc bool) (id string, err error)
}

// Errors HeapDumps.Take may wrap.
var (
	ErrNoApp    = errors.New("no such app")
	ErrDumpBusy = errors.New("a heap dump is being taken")
)

// DumpRequestHeader must come with a POST that takes a dump, with the
// value heapdump (the header every request that changes something needs).
const DumpRequestHeader = xsrf.Header

var dumpID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// DumpFiles are the files of a dump the web view serves.
var DumpFiles = []string{"heap.hprof", "summary.json"}

func (h *Handler) heapDumpRoutes() {
	if h.cfg.HeapDumps == nil {
		return
	}
	h.mux.HandleFunc("POST /api/v1/apps/{serial}/{package}/heapdump", h.takeDump)
	h.mux.HandleFunc("GET /api/v1/heapdumps/{id}/{file}", h.dumpFile)
	h.mux.HandleFunc("GET /heapdumps/{id}", h.dumpPage)
	h.mux.HandleFunc("GET /heapdumps", h.dumpList)
}

// DumpSummary is what the web view reads of a dump's summary.json.
type DumpSummary struct {
	ID          string    `json:"-"`
	Serial      string    `json:"serial"`
	Package     string    `json:"package"`
	PID         int       `json:"pid"`
	API         int       `json:"api"`
	Start       time.Time `json:"start"`
	DumpSeconds float64   `json:"dump_seconds"`
	DumpBytes   uint64    `json:"dump_bytes"`
	Objects     uint64    `json:"objects"`
	Unreachable uint64    `json:"unreachable_objects"`
	// What the dump made for itself, left out of every count (Android
	// 15's Bitmap.dumpData).
	LeftOut      uint64 `json:"left_out_objects"`
	LeftOutBytes uint64 `json:"left_out_bytes"`
	TopClasses   []struct {
		Heap      string `json:"heap"`
		Class     string `json:"class"`
		Instances uint64 `json:"instances"`
		Bytes     uint64 `json:"bytes"`
		Retained  uint64 `json:"retained_bytes"`
	} `json:"top_classes"`
	Leaks []struct {
		Kind, Class, Why string
		ID               uint64
		Retained         uint64 `json:"retained_bytes"`
		Path             []struct {
			Class, Root, Ref string
			ID               uint64
		}
	} `json:"leaks"`
	DuplicateStrings []DumpDuplicate   `json:"duplicate_strings"`
	DuplicateBitmaps []DumpDuplicate   `json:"duplicate_bitmaps"`
	Files            map[string]string `json:"-"`
	// How many groups there are: the lists are the top ones (0 in
	// summaries written before the totals were).
	StringGroups int `json:"duplicate_string_groups"`
	BitmapGroups int `json:"duplicate_bitmap_groups"`
}

// StringsShown says how many duplicate String groups the page lists:
// "3", or "top 20 of 34".
func (s *DumpSummary) StringsShown() string { return shownOf(len(s.DuplicateStrings), s.StringGroups) }

// BitmapsShown is StringsShown for Bitmaps.
func (s *DumpSummary) BitmapsShown() string { return shownOf(len(s.DuplicateBitmaps), s.BitmapGroups) }

func shownOf(listed, total int) string {
	if total > listed {
		return fmt.Sprintf("top %d of %d", listed, total)
	}
	return strconv.Itoa(listed)
}

// DumpDuplicate is a group of duplicates in a summary.
type DumpDuplicate struct {
	Value           string
	Copies, Buffers int
	Wasted          uint64 `json:"wasted_bytes"`
}

// readSummary reads dump id's summary.json.
func (h *Handler) readSummary(id string) (*DumpSummary, error) {
	b, err := os.ReadFile(filepath.Join(h.cfg.HeapDumps.Dir, id, "summary.json"))
	if err != nil {
		return nil, err
	}
	s := &DumpSummary{ID: id, Files: map[string]string{}}
	if err := json.Unmarshal(b, s); err != nil {
		return nil, err
	}
	for _, f := range DumpFiles {
		s.Files[f] = "/api/v1/heapdumps/" + id + "/" + f
	}
	return s, nil
}

func (h *Handler) dumpPage(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !dumpID.MatchString(id) {
		http.Error(w, "no such heap dump", http.StatusNotFound)
		return
	}
	s, err := h.readSummary(id)
	if err != nil {
		http.Error(w, "no such heap dump", http.StatusNotFound)
		return
	}
	h.render(w, r, "heapdump", "Heap dump of "+s.Package+" on "+s.Serial, s)
}

func (h *Handler) dumpList(w http.ResponseWriter, r *http.Request) {
	ents, _ := os.ReadDir(h.cfg.HeapDumps.Dir)
	var list []*DumpSummary
	for _, e := range ents {
		if !e.IsDir() || !dumpID.MatchString(e.Name()) {
			continue
		}
		if s, err := h.readSummary(e.Name()); err == nil {
			list = append(list, s)
		}
	}
	slices.SortFunc(list, func(a, b *DumpSummary) int { return b.Start.Compare(a.Start) })
	h.render(w, r, "heapdumps", "Heap dumps", list)
}

// dumpResult answers a POST that took a dump.
type dumpResult struct {
	ID      string            `json:"id"`
	Page    string            `json:"page"`
	Files   map[string]string `json:"files"`
	Summary json.RawMessage   `json:"summary"`
}

func (h *Handler) takeDump(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(DumpRequestHeader) != "heapdump" {
		http.Error(w, "a heap dump freezes the app: send the header "+DumpRequestHeader+": heapdump to take one", http.StatusForbidden)
		return
	}
	gc := false
	switch v := r.URL.Query().Get("gc"); v {
	case "", "0", "false":
	case "1", "true":
		gc = true
	default:
		http.Error(w, "query parameter gc: want 1 or 0", http.StatusBadRequest)
		return
	}
	serial, pkg := r.PathValue("serial"), r.PathValue("package")
	id, err := h.cfg.HeapDumps.Take(r.Context(), serial, pkg, gc)
	switch {
	case errors.Is(err, ErrNoApp):
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	case errors.Is(err, ErrDumpBusy):
		http.Error(w, err.Error(), http.StatusConflict)
		return
	case err != nil:
		http.Error(w, "heap dump: "+err.Error(), http.StatusBadGateway)
		return
	}
	res := dumpResult{ID: id, Page: "/heapdumps/" + id, Files: map[string]string{}}
	for _, f := range DumpFiles {
		res.Files[f] = "/api/v1/heapdumps/" + id + "/" + f
	}
	if b, err := os.ReadFile(filepath.Join(h.cfg.HeapDumps.Dir, id, "summary.json")); err == nil {
		res.Summary = b
	}
	writeJSON(w, r, res)
}

func (h *Handler) dumpFile(w http.ResponseWriter, r *http.Request) {
	id, file := r.PathValue("id"), r.PathValue("file")
	known := false
	for _, f := range DumpFiles {
		known = known || f == file
	}
	if !dumpID.MatchString(id) || !known {
		http.Error(w, "no such heap dump file", http.StatusNotFound)
		return
	}
	p := filepath.Join(h.cfg.HeapDumps.Dir, id, file)
	if _, err := os.Stat(p); err != nil {
		http.Error(w, "no such heap dump file", http.StatusNotFound)
		return
	}
	if file == "heap.hprof" {
		w.Header().Set("Content-Disposition", `attachment; filename="`+id+`.hprof"`)
	}
	http.ServeFile(w, r, p)
}
