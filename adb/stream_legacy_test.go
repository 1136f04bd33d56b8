package adb_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"testing"

	"github.com/alloctrack/alloctrack/adb"
)

// StartShell on shell: (the daemon's logcat) gives the output as it
// comes, before the command ends, and ends when the context does.
func TestShellStreamFollowsUntilCancelled(t *testing.T) {
	next := make(chan struct{})
	s := newFakeServer(t, steps(expect("host:transport:d"), send("OKAY"), expect("shell:logcat -s TestRunner"), send("OKAY"),
		send("line 1\r\n"), func(p *peer) error { <-next; return nil }, send("line 2\n"), waitClose))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rc, err := adb.NewClient(s.addr()).StartShell(ctx, "d", false, "logcat", "-s", "TestRunner")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	br := bufio.NewReader(rc)
	if l, err := br.ReadString('\n'); err != nil || l != "line 1\r\n" {
		t.Fatalf("first line %q, %v", l, err)
	}
	close(next)
	if l, err := br.ReadString('\n'); err != nil || l != "line 2\n" {
		t.Fatalf("second line %q, %v", l, err)
	}
	cancel()
	// The server sends nothing more and keeps the connection: only the
	// cancel ends the read.
	if _, err := br.ReadString('\n'); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after cancel: %v, want the deadline the cancel set", err)
	}
}

// A device that refuses the service is an error naming the command.
func TestShellStreamRefused(t *testing.T) {
	s := newFakeServer(t, steps(expect("host:transport:d"), send("OKAY"), expect("shell:logcat"), send("FAIL"+hexs("closed")), waitClose))
	_, err := adb.NewClient(s.addr()).StartShell(context.Background(), "d", false, "logcat")
	var fe *adb.FailError
	if !errors.As(err, &fe) || fe.Reason != "closed" {
		t.Fatalf("StartShell = %v, want a FailError closed", err)
	}
}
