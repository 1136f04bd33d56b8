package exporter_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack/ddm"
	"github.com/alloctrack/alloctrack/ddms/allocreport"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/alloctrack/alloctrack/alloctrack"
	"github.com/alloctrack/alloctrack/exporter"
)

// fastHandler serves src the way serve does: the collector through
// HandlerConfig.Counts, not registered in reg.
func fastHandler(t testing.TB, src exporter.Source) http.Handler {
	t.Helper()
	reg := prometheus.NewRegistry()
	h, err := exporter.NewHandler(reg, exporter.HandlerConfig{Counts: exporter.NewCollector(src)})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// plainHandler serves src through client_golang alone.
func plainHandler(src exporter.Source) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(exporter.NewCollector(src))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true})
}

func fetch(t testing.TB, h http.Handler, accept, encoding string) (string, http.Header) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if encoding != "" {
		req.Header.Set("Accept-Encoding", encoding)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", rec.Code, rec.Body.String())
	}
	var body io.Reader = rec.Body
	if rec.Header().Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(rec.Body)
		if err != nil {
			t.Fatal(err)
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), rec.Header()
}

func sortedLines(s string) []string {
	l := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	slices.Sort(l)
	return l
}

const openMetricsAccept = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"

// The handler's text path must give exactly the lines client_golang gives
// for the same snapshot, in both text formats, compressed or not.
func TestFastMetricsMatchCollect(t *testing.T) {
	for name, snap := range map[string]alloctrack.Snapshot{
		"fixture": fixture(),
		"farm":    farmSnapshot(2, 3, 7, 20),
		"empty":   {},
		"escapes": escapesSnapshot(),
		"shared":  sharedSitesSnapshot(),
		// Heapprofd apps: estimate families (floats), no exact ones, alone
		// and next to DDM apps.
		"heapprofd":       heapprofdSnapshot(false),
		"heapprofd mixed": heapprofdSnapshot(true),
	} {
		src := fixedSource{snap}
		fast, plain := fastHandler(t, src), plainHandler(src)
		for _, accept := range []string{"", "text/plain;version=0.0.4", openMetricsAccept} {
			for _, enc := range []string{"", "gzip", "identity", "gzip;q=0, identity"} {
				got, hdr := fetch(t, fast, accept, enc)
				want, wantHdr := fetch(t, plain, accept, enc)
				if hdr.Get("Content-Type") != wantHdr.Get("Content-Type") {
					t.Errorf("%s, Accept %q: content type %q, client_golang %q", name, accept, hdr.Get("Content-Type"), wantHdr.Get("Content-Type"))
				}
				if (hdr.Get("Content-Encoding") == "gzip") != (wantHdr.Get("Content-Encoding") == "gzip") {
					t.Errorf("%s, Accept-Encoding %q: content encoding %q, client_golang %q", name, enc, hdr.Get("Content-Encoding"), wantHdr.Get("Content-Encoding"))
				}
				if g, w := sortedLines(got), sortedLines(want); !slices.Equal(g, w) {
					for _, l := range g {
						if !slices.Contains(w, l) {
							t.Errorf("%s, Accept %q: line only in the fast output: %s", name, accept, l)
						}
					}
					for _, l := range w {
						if !slices.Contains(g, l) {
							t.Errorf("%s, Accept %q: line only in client_golang's output: %s", name, accept, l)
						}
					}
					t.Fatalf("%s, Accept %q, Accept-Encoding %q: outputs differ", name, accept, enc)
				}
				if strings.Contains(accept, "openmetrics") && !strings.HasSuffix(got, "# EOF\n") {
					t.Errorf("%s: OpenMetrics output does not end with # EOF", name)
				}
			}
		}
	}
}

// sharedSitesSnapshot has apps that share sites with an app before them:
// first, last, and runs in the middle of their lists, so that the info
// lines written once per site come from pieces of several apps' text.
func sharedSitesSnapshot() alloctrack.Snapshot {
	s := farmSnapshot(1, 3, 3, 10)
	first := s.Apps[0].Counts.Sites
	for _, i := range []int{0, 3, 4, 5, 9} {
		s.Apps[1].Counts.Sites[i].SiteInfo = first[i].SiteInfo
	}
	for _, i := range []int{1, 2, 7} {
		s.Apps[2].Counts.Sites[i].SiteInfo = first[i].SiteInfo
	}
	return s
}

// escapesSnapshot has label values that need escaping and values that
// format differently in the two formats.
func escapesSnapshot() alloctrack.Snapshot {
	s := farmSnapshot(1, 1, 2, 2)
	a := &s.Apps[0]
	a.Counts.Classes[0].Class = "a\\b\"c\nd"
	a.Counts.Sites[0].Frame = `x.Y.z(Y.java:1) "quoted" \ back` + "\nline"
	a.Counts.Sites[1].Frame = ""
	a.Counts.Sites[1].Allocations = 1
	a.Counts.ClassOther = alloctrack.Count{Allocations: 1 << 60, Bytes: 12345678901234567}
	return s
}

// Protobuf, when asked for, still comes whole from client_golang.
func TestFastMetricsProtobuf(t *testing.T) {
	src := fixedSource{fixture()}
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited")
	rec := httptest.NewRecorder()
	fastHandler(t, src).ServeHTTP(rec, req)
	format := expfmt.ResponseFormat(rec.Result().Header)
	if format.FormatType() != expfmt.TypeProtoDelim {
		t.Fatalf("content type %q, want delimited protobuf", rec.Header().Get("Content-Type"))
	}
	dec := expfmt.NewDecoder(bytes.NewReader(rec.Body.Bytes()), format)
	names := map[string]int{}
	for {
		mf := new(dto.MetricFamily)
		if err := dec.Decode(mf); err != nil {
			if err == io.EOF {
				break
			}
			t.Fatal(err)
		}
		names[mf.GetName()] = len(mf.GetMetric())
	}
	if names["alloctrack_site_allocations_total"] != 5 || names["alloctrack_site_info"] != 3 || names["alloctrack_app_pid"] != 2 {
		t.Fatalf("protobuf families: %v", names)
	}
}

// A scrape after an app's counters change shows the new counts; apps that
// go away leave no series behind.
func TestFastMetricsFollowChanges(t *testing.T) {
	c := alloctrack.NewCounters(alloctrack.AggregateConfig{})
	b := allocreport.NewBuilder()
	b.Add(16, 1, "[B", []allocreport.FrameName{{Class: "Lcom/x/A;", Method: "m", File: "A.java", Line: 3}})
	r, err := b.Report()
	if err != nil {
		t.Fatal(err)
	}
	src := &mutableSource{}
	h := fastHandler(t, src)
	app := func() alloctrack.AppSnapshot {
		return alloctrack.AppSnapshot{AppStatus: alloctrack.AppStatus{Serial: "s", Package: "p", State: alloctrack.StateTracking, RTT: rtt()}, Counts: c.Snapshot()}
	}
	for i := 1; i <= 3; i++ {
		c.Add(ddm.WindowOfReport(r, time.Time{}, timeAt(i)))
		src.s = alloctrack.Snapshot{Apps: []alloctrack.AppSnapshot{app()}}
		got, _ := fetch(t, h, "", "")
		want := `alloctrack_allocations_total{class="byte[]",package="p",serial="s"} ` + string(rune('0'+i))
		if !strings.Contains(got, want+"\n") {
			t.Fatalf("after %d reports: no %s in\n%s", i, want, got)
		}
	}
	src.s = alloctrack.Snapshot{}
	if got, _ := fetch(t, h, "", ""); strings.Contains(got, `serial="s"`) {
		t.Fatalf("an app gone from the snapshot still has series:\n%s", got)
	}
}

type mutableSource struct{ s alloctrack.Snapshot }

func (m *mutableSource) Snapshot() alloctrack.Snapshot { return m.s }

func timeAt(i int) time.Time { return time.Unix(int64(1000+10*i), 0) }
