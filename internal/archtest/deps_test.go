package archtest

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/alloctrack/alloctrack/"

// forbidden lists, per package, import path prefixes that must not appear
// among its dependencies (direct or indirect).
var forbidden = map[string][]string{
	"jdwp":                  {mod + "adb", mod + "ddms", mod + "alloctrack", mod + "exporter", mod + "sim", "github.com/prometheus/", "go.uber.org/zap", "github.com/electricbubble/gadb"},
	"ddms":                  {mod + "adb", mod + "alloctrack", mod + "exporter", mod + "sim", "github.com/prometheus/", "go.uber.org/zap", "github.com/electricbubble/gadb"},
	"ddms/hprof":            {mod + "adb", mod + "jdwp", mod + "alloctrack", mod + "exporter", mod + "sim", "github.com/prometheus/", "go.uber.org/zap", "github.com/electricbubble/gadb"},
	"ddms/allocreport":      {mod + "adb", mod + "jdwp", mod + "alloctrack", mod + "exporter", mod + "sim", "github.com/prometheus/", "go.uber.org/zap", "github.com/electricbubble/gadb"},
	"tialloc":               {mod + "adb", mod + "ddms", mod + "jdwp", mod + "perfetto", mod + "alloctrack", mod + "exporter", mod + "sim", "github.com/prometheus/", "go.uber.org/zap", "github.com/electricbubble/gadb"},
	"perfetto":              {mod + "adb", mod + "ddms", mod + "jdwp", mod + "alloctrack", mod + "exporter", mod + "sim", "github.com/prometheus/", "go.uber.org/zap", "github.com/electricbubble/gadb"},
	"instrument":            {mod + "adb", mod + "ddms", mod + "jdwp", mod + "perfetto", mod + "alloctrack", mod + "exporter", mod + "web", mod + "sim", "github.com/prometheus/", "go.uber.org/zap", "github.com/electricbubble/gadb"},
	"alloctrack":            {mod + "alloctrack/", mod + "ddms", mod + "jdwp", mod + "perfetto", mod + "adb", "go.uber.org/zap", mod + "exporter", mod + "sim", "github.com/prometheus/", "github.com/electricbubble/gadb"},
	"alloctrack/ddm":        {mod + "alloctrack/supervisor", mod + "alloctrack/offline", mod + "alloctrack/heapprofd", mod + "adb", mod + "exporter", mod + "web", mod + "sim", "github.com/prometheus/", "github.com/electricbubble/gadb"},
	"alloctrack/heapprofd":  {mod + "alloctrack/supervisor", mod + "alloctrack/offline", mod + "alloctrack/ddm", mod + "ddms", mod + "jdwp", mod + "adb", mod + "exporter", mod + "web", mod + "sim", "github.com/prometheus/", "github.com/electricbubble/gadb"},
	"alloctrack/agentlog":   {mod + "alloctrack/supervisor", mod + "alloctrack/offline", mod + "alloctrack/ddm", mod + "alloctrack/heapprofd", mod + "jdwp", mod + "perfetto", mod + "adb", mod + "exporter", mod + "web", mod + "sim", "github.com/prometheus/", "go.uber.org/zap", "github.com/electricbubble/gadb"},
	"alloctrack/supervisor": {mod + "alloctrack/offline", mod + "adb", mod + "exporter", mod + "web", mod + "sim", "github.com/prometheus/", "github.com/electricbubble/gadb"},
	"alloctrack/pertest":    {mod + "alloctrack/supervisor", mod + "alloctrack/offline", mod + "jdwp", mod + "adb", mod + "exporter", mod + "web", mod + "sim", "github.com/prometheus/", "go.uber.org/zap", "github.com/electricbubble/gadb"},
	"alloctrack/offline":    {mod + "alloctrack/supervisor", mod + "adb", mod + "exporter", mod + "web", mod + "sim", "github.com/prometheus/", "github.com/electricbubble/gadb"},
	"adb":                   {mod + "alloctrack", mod + "exporter", mod + "sim", "github.com/prometheus/"},
	"exporter":              {mod + "adb", mod + "sim", "github.com/electricbubble/gadb"},
	"web":                   {mod + "adb", mod + "sim", mod + "exporter", "github.com/prometheus/", "github.com/electricbubble/gadb"},
	"sim":                   {mod + "exporter", mod + "adb", "github.com/prometheus/", "github.com/electricbubble/gadb"},
	"apk":                   {mod + "adb", mod + "ddms", mod + "jdwp", mod + "perfetto", mod + "alloctrack", mod + "exporter", mod + "web", mod + "sim", "github.com/prometheus/", "go.uber.org/zap", "github.com/electricbubble/gadb"},
	"adb/transcript":        {mod + "alloctrack", mod + "ddms", mod + "jdwp", mod + "perfetto", mod + "exporter", mod + "web", mod + "sim", "github.com/prometheus/", "go.uber.org/zap", "github.com/electricbubble/gadb"},
}

// allowed are exceptions to forbidden: the simulator's replay device reads
// transcripts, which sit on the codecs floor under adb/.
var allowed = map[string][]string{
	"sim": {mod + "adb/transcript"},
}

func TestPackageBoundaries(t *testing.T) {
	for pkg, bad := range forbidden {
		out, err := exec.Command("go", "list", "-deps", mod+pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, b := range bad {
				if strings.HasPrefix(dep, b) && !slices.Contains(allowed[pkg], dep) {
					t.Errorf("%s depends on %s", pkg, dep)
				}
			}
		}
	}
}
