package supervisor_test

import (
	"context"
	"net"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/alloctrack/alloctrack/alloctrack/supervisor"
	"github.com/alloctrack/alloctrack/internal/source"
)

// An adb server found down is shown with the reason the log has (here:
// connection refused), not only as down.
func TestDaemonServerDownSaysWhy(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now: every dial is refused
	d := supervisor.NewDaemon(daemonConfig(), []supervisor.Source{source.New(addr)}, zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	eventually(t, "the server shown down with its error", func() bool {
		s := d.Snapshot()
		return len(s.Servers) == 1 && !s.Servers[0].Up && s.Servers[0].Errors > 0 && s.Servers[0].LastError != ""
	})
	if s := d.Snapshot().Servers[0]; !strings.Contains(s.LastError, "connection refused") {
		t.Errorf("server %s down with error %q, want the dial's connection refused", s.Addr, s.LastError)
	}
}
