package heapdump_test

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alloctrack/alloctrack/alloctrack/heapdump"
	"github.com/alloctrack/alloctrack/internal/hproftest"
	"github.com/alloctrack/alloctrack/internal/realtest"
)

// An Android dump's objects are counted in the heap each HEAP DUMP INFO
// names; an obsolete NODATA array counts with its length.
func TestHistogramPerHeap(t *testing.T) {
	h, err := heapdump.Read(bytes.NewReader(hproftest.AndroidDump()))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]heapdump.ClassCount{}
	for _, c := range h.Classes {
		got[c.Heap+" "+c.Class] = c
	}
	want := map[string][2]uint64{
		"zygote com.example.Foo": {1, 8},
		"app com.example.Foo":    {3, 24},
		"app com.example.Foo[]":  {1, 8},
		"app int[]":              {1, 20},
		"app byte[]":             {1, 100},
		"zygote java.lang.Class": {1, 0}, // Foo's CLASS DUMP
	}
	for k, w := range want {
		if c := got[k]; c.Instances != w[0] || c.Bytes != w[1] {
			t.Errorf("%s: %d instances, %d bytes; want %v", k, c.Instances, c.Bytes, w)
		}
	}
	if len(got) != len(want) || h.Objects != 8 {
		t.Errorf("histogram %+v", h.Classes)
	}
}

func TestClassName(t *testing.T) {
	for in, want := range map[string]string{
		"java/lang/String": "java.lang.String", "[I": "int[]", "[[Ljava/lang/Object;": "java.lang.Object[][]",
		"com.example.Foo": "com.example.Foo", "int[]": "int[]",
	} {
		if got := heapdump.ClassName(in); got != want {
			t.Errorf("ClassName(%q) = %q, want %q", in, got, want)
		}
	}
}

// The program the JVM test runs: it keeps a known number of objects of
// classes of its own, says it is ready, and waits.
const keeper = `
public class Keeper {
    static class Leaf { long a; int b; }
    static class Node { Object next; }
    static class Holder { Object[] big; }
    static Holder held;
    public static void main(String[] args) throws Exception {
        held = new Holder();
        held.big = new Object[100];
        for (int i = 0; i < 100; i++) held.big[i] = new long[1000];
        java.util.List<Object> keep = new java.util.ArrayList<>();
        for (int i = 0; i < 12345; i++) keep.add(new Leaf());
        for (int i = 0; i < 777; i++) keep.add(new Node[3]);
        for (int i = 0; i < 321; i++) keep.add(new Node());
        System.out.println("ready");
        System.out.flush();
        Thread.sleep(120_000);
        System.out.println(keep.size());
    }
}
`

// TestJVMDump dumps a real JVM's heap with jcmd (the JDK's "JAVA PROFILE
// 1.0.2", 8-byte ids) and checks our histogram against what the program
// keeps and against jcmd's own class histogram.
func TestJVMDump(t *testing.T) {
	javac := realtest.Program(t, "javac", "default-jdk-headless")
	java := realtest.Program(t, "java", "default-jdk-headless")
	jcmd := realtest.Program(t, "jcmd", "default-jdk-headless")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Keeper.java"), []byte(keeper), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(javac, "-d", dir, filepath.Join(dir, "Keeper.java")).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	cmd := exec.Command(java, "-Xmx128m", "-XX:+UseSerialGC", "-cp", dir, "Keeper")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ready <- sc.Scan() && sc.Text() == "ready"
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("the JVM did not say it was ready")
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the JVM did not start in 60 s")
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	// A histogram before the dump and one after: the classes whose count
	// the two agree on held still while the dump was taken.
	before, err := exec.Command(jcmd, pid, "GC.class_histogram").CombinedOutput()
	if err != nil {
		t.Fatalf("jcmd GC.class_histogram: %v\n%s", err, before)
	}
	file := filepath.Join(dir, "heap.hprof")
	if o, err := exec.Command(jcmd, pid, "GC.heap_dump", file).CombinedOutput(); err != nil {
		t.Fatalf("jcmd GC.heap_dump: %v\n%s", err, o)
	}
	histo, err := exec.Command(jcmd, pid, "GC.class_histogram").CombinedOutput()
	if err != nil {
		t.Fatalf("jcmd GC.class_histogram: %v\n%s", err, histo)
	}

	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := heapdump.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	if h.Header.Version != "JAVA PROFILE 1.0.2" || h.Header.IDSize != 8 {
		t.Errorf("header %+v", h.Header)
	}
	ours := map[string]uint64{}
	for _, c := range h.Classes {
		ours[c.Class] += c.Instances
	}
	// What the program keeps.
	for class, n := range map[string]uint64{"Keeper$Leaf": 12345, "Keeper$Node[]": 777, "Keeper$Node": 321} {
		if ours[class] != n {
			t.Errorf("%s: %d instances in the dump, the program keeps %d", class, ours[class], n)
		}
	}
	// jcmd's histogram: "num: #instances #bytes class name (module)". Every
	// class that held still must have as many instances in ours.
	line := regexp.MustCompile(`^\s*\d+:\s+(\d+)\s+\d+\s+(\S+)`)
	parse := func(out []byte) map[string]uint64 {
		m := map[string]uint64{}
		for _, l := range strings.Split(string(out), "\n") {
			if f := line.FindStringSubmatch(l); f != nil {
				n, _ := strconv.ParseUint(f[1], 10, 64)
				m[heapdump.ClassName(f[2])] += n
			}
		}
		return m
	}
	after, earlier := parse(histo), parse(before)
	checked := 0
	for name, n := range after {
		if earlier[name] != n {
			continue
		}
		if ours[name] != n {
			t.Errorf("%s: %d instances in our histogram, %d in jcmd's", name, ours[name], n)
		}
		checked++
	}
	if checked < len(after)*9/10 || after["Keeper$Leaf"] != 12345 {
		t.Errorf("only %d of jcmd's %d classes held still:\n%s", checked, len(after), histo)
	}
	t.Logf("%d objects in %d classes; %s", h.Objects, len(h.Classes), h.Header.Version)

	// Retained sizes (field and element data, 8-byte references): the
	// Holder keeps its Object[100] and the 100 long[1000]; each Leaf (a
	// long and an int) keeps itself alone.
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	g, err := heapdump.ReadGraph(f)
	if err != nil {
		t.Fatal(err)
	}
	retained := map[string]uint64{}
	for _, c := range g.Histogram().Classes {
		retained[c.Class] += c.Retained
	}
	for class, want := range map[string]uint64{"Keeper$Holder": 8 + 100*8 + 100*8000, "Keeper$Leaf": 12345 * 12} {
		if retained[class] != want {
			t.Errorf("%s retains %d bytes, want %d", class, retained[class], want)
		}
	}
}

// BenchmarkHistogram reads a dump of a million instances and 250,000
// arrays: throughput, and memory that does not grow with the objects.
func BenchmarkHistogram(b *testing.B) {
	dump := hproftest.ManyObjects(1_000_000)
	b.SetBytes(int64(len(dump)))
	b.ReportAllocs()
	for b.Loop() {
		h, err := heapdump.Read(bytes.NewReader(dump))
		if err != nil || h.Objects != 1_250_000 {
			b.Fatal(err, h)
		}
	}
}

// ART starts every segment in the default heap: an object in a segment
// that names no heap is not counted in the heap the segment before named.
func TestHistogramSegmentStartsInDefaultHeap(t *testing.T) {
	d := hproftest.AndroidDump()
	d = d[:len(d)-9] // without HEAP DUMP END
	seg := []byte{0x21, 0, 0, 0x40, 0 /* id */, 0, 0, 0, 0 /* stack */, 0, 0, 1, 0 /* class 0x100 */, 0, 0, 0, 4 /* size */, 0, 0, 0, 0}
	d = append(d, 0x1C, 0, 0, 0, 0, 0, 0, 0, byte(len(seg)))
	d = append(d, seg...)
	h, err := heapdump.Read(bytes.NewReader(d))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range h.Classes {
		if c.Heap == "default" && c.Class == "com.example.Foo" && c.Instances == 1 {
			return
		}
	}
	t.Errorf("the last segment's object is not in the default heap: %+v", h.Classes)
}
