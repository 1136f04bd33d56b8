package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/internal/realtest"
)

// The program the agent watches. HotSpot sends VMObjectAlloc only for
// objects the VM itself allocates, not for bytecode's new: reflection's
// Array.newInstance and Object.clone are two such. Each is done a known
// number of times in a method of its own, on its own thread for one.
const allocJava = `import java.lang.reflect.Array;

public class Alloc {
    static Object keep;

    static void makeArrays(int n) {
        for (int i = 0; i < n; i++) keep = Array.newInstance(String.class, 10);
    }

    static void cloneInts(int n) {
        int[] a = new int[100];
        for (int i = 0; i < n; i++) keep = a.clone();
    }

    public static void main(String[] args) throws Exception {
        int arrays = Integer.parseInt(args[0]), clones = Integer.parseInt(args[1]);
        Thread t = new Thread(() -> cloneInts(clones), "cloner");
        t.start();
        makeArrays(arrays);
        t.join();
    }
}
`

// agentLib builds AOSP's tiallocsample agent from Debian's source package
// of ART (.ci/run downloads it and sets ALLOCTRACK_ART_SRC) against the
// JDK's jvmti.h, with a stand-in for the one Android header it includes.
// It returns the library and the agent's mkflame.py.
func agentLib(t *testing.T) (lib, mkflame string) {
	src := realtest.EnvFile(t, "ALLOCTRACK_ART_SRC", "the orig tarball of Debian's source package android-platform-art (.ci/run downloads it)")
	gxx := realtest.Program(t, "g++", "g++")
	javac := realtest.Program(t, "javac", "default-jdk-headless")
	dir := t.TempDir()
	out, err := exec.Command("tar", "-xf", src, "-C", dir, "--strip-components=1", "--wildcards", "*/tools/jvmti-agents/ti-alloc-sample/*").CombinedOutput()
	if err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	agent := filepath.Join(dir, "tools", "jvmti-agents", "ti-alloc-sample")
	// The stand-in for android-base/logging.h: LOG(severity) << … to
	// standard error, and the ATTRIBUTE_UNUSED older agents use.
	os.MkdirAll(filepath.Join(dir, "include", "android-base"), 0o755)
	os.WriteFile(filepath.Join(dir, "include", "android-base", "logging.h"), []byte(
		"#pragma once\n#include <iostream>\n#define ATTRIBUTE_UNUSED __attribute__((__unused__))\n#define LOG(severity) (std::cerr << #severity \": \")\n"), 0o644)
	jdk, err := filepath.EvalSymlinks(javac)
	if err != nil {
		t.Fatal(err)
	}
	jdk = filepath.Dir(filepath.Dir(jdk))
	lib = filepath.Join(dir, "libtiallocsample.so")
	cmd := exec.Command(gxx, "-std=c++20", "-O1", "-shared", "-fPIC", "-o", lib,
		"-I", filepath.Join(dir, "include"), "-I", filepath.Join(jdk, "include"), "-I", filepath.Join(jdk, "include", "linux"),
		filepath.Join(agent, "ti_alloc_sample.cc"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the agent: %v\n%s", err, out)
	}
	return lib, filepath.Join(agent, "mkflame.py")
}

// runAgent runs Alloc under the agent at rate and returns the log.
func runAgent(t *testing.T, lib string, rate, arrays, clones int) string {
	t.Helper()
	javac := realtest.Program(t, "javac", "default-jdk-headless")
	java := realtest.Program(t, "java", "default-jdk-headless")
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "Alloc.java"), []byte(allocJava), 0o644)
	if out, err := exec.Command(javac, "-d", dir, filepath.Join(dir, "Alloc.java")).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	log := filepath.Join(dir, "alloc.log")
	cmd := exec.Command(java, "-Xmx256m", "-XX:+UseCompressedOops", "-XX:TieredStopAtLevel=1",
		fmt.Sprintf("-agentpath:%s=%d,64,%s", lib, rate, log), "-cp", dir, "Alloc", fmt.Sprint(arrays), fmt.Sprint(clones))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("java with the agent: %v\n%s", err, out)
	}
	return log
}

// TestAgentOnJVM builds the real agent, runs a JVM with it on a program
// whose allocations the test sets, and checks our report of its log
// against what the program did, and our folded stacks against the
// agent's own mkflame.py.
func TestAgentOnJVM(t *testing.T) {
	lib, mkflame := agentLib(t)
	const arrays, clones = 3000, 2000
	// HotSpot, 64-bit with compressed oops: a 16-byte array header, then
	// the elements.
	const arrayBytes, cloneBytes = 16 + 10*4, 16 + 100*4

	log := runAgent(t, lib, 1, arrays, clones)
	for _, c := range []struct {
		frame, class string
		n, size      uint64
	}{{`^Alloc\.makeArrays$`, "java.lang.String[]", arrays, arrayBytes}, {`^Alloc\.cloneInts$`, "int[]", clones, cloneBytes}} {
		out, errOut, code := runCmd(t, "report", "--format", "json", "--top", "0", "--frame", c.frame, log)
		if code != 0 {
			t.Fatalf("report: exit %d: %s", code, errOut)
		}
		var s jsonSummary
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatal(err)
		}
		if s.Allocations != c.n || s.Bytes != c.n*c.size || len(s.TopClasses) != 1 || s.TopClasses[0].Class != c.class {
			t.Errorf("%s: %d samples of %d bytes in %+v; the program made %d %s of %d bytes", c.frame, s.Allocations, s.Bytes, s.TopClasses, c.n, c.class, c.size)
		}
		if len(s.TopSites) != 1 || !strings.Contains(strings.Join(s.TopSites[0].Frames, ";"), strings.Trim(strings.ReplaceAll(c.frame, `\`, ""), "^$")) {
			t.Errorf("%s: sites %+v", c.frame, s.TopSites)
		}
	}

	// mkflame.py's folded stacks and ours agree on every total, and on the
	// program's two stacks.
	python := realtest.Program(t, "python3", "python3")
	ref, err := exec.Command(python, mkflame, log).Output()
	if err != nil {
		t.Fatalf("mkflame.py: %v", err)
	}
	ours, errOut, code := runCmd(t, "report", "--format", "folded", log)
	if code != 0 {
		t.Fatalf("folded: exit %d: %s", code, errOut)
	}
	for _, m := range []string{"", "makeArrays", "cloneInts"} {
		r, o := foldedSum(t, string(ref), m), foldedSum(t, ours, m)
		if r != o || r == 0 {
			t.Errorf("folded stacks with %q: mkflame.py sums %d, we sum %d", m, r, o)
		}
	}

	// Sampled one in 7 per thread: the estimates are within one sample
	// (7 allocations) of what the program made, per thread's method.
	log = runAgent(t, lib, 7, arrays, clones)
	for _, c := range []struct {
		frame string
		n     uint64
	}{{`^Alloc\.makeArrays$`, arrays}, {`^Alloc\.cloneInts$`, clones}} {
		out, _, code := runCmd(t, "report", "--format", "json", "--agent.rate", "7", "--frame", c.frame, log)
		var s jsonSummary
		if err := json.Unmarshal([]byte(out), &s); err != nil || code != 0 {
			t.Fatalf("exit %d, %v", code, err)
		}
		if !s.Estimated || s.Allocations+7 < c.n || s.Allocations > c.n+7 || s.SampledAllocations*7 != s.Allocations {
			t.Errorf("%s at rate 7: estimated %v, %d allocations from %d samples; the program made %d", c.frame, s.Estimated, s.Allocations, s.SampledAllocations, c.n)
		}
	}
}

// foldedSum sums the counts of the folded lines that contain m.
func foldedSum(t *testing.T, folded, m string) uint64 {
	var sum uint64
	sc := bufio.NewScanner(strings.NewReader(folded))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if i < 0 || !strings.Contains(line[:i], m) {
			continue
		}
		var v uint64
		if _, err := fmt.Sscan(line[i+1:], &v); err != nil {
			t.Fatalf("folded line %q", line)
		}
		sum += v
	}
	return sum
}
