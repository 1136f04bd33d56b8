package adbtest

import (
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFreePort(t *testing.T) {
	for range 50 {
		if p := FreePort(t); p == 5037 || (p >= 5555 && p <= 5585) || p <= 0 {
			t.Fatalf("port %d", p)
		}
	}
}

func TestStartServer(t *testing.T) {
	s := StartServer(t)
	if v, err := s.version(); err != nil || v != 41 {
		t.Fatalf("host:version %d %v", v, err)
	}
	if out, err := s.Run(t, "version"); err != nil || !strings.Contains(out, "Android Debug Bridge") {
		t.Fatalf("adb version: %q %v", out, err)
	}
	m, err := s.Devices(t)
	if err != nil || len(m) != 0 {
		t.Fatalf("devices %v %v", m, err)
	}
	// Host protocol: a request the server refuses comes back as FAIL.
	c := s.Dial(t)
	var fe *FailError
	if err := Request(c, "host:transport:no-such-device"); err == nil || !asFail(err, &fe) {
		t.Fatalf("transport to a missing device: %v", err)
	}
}

func asFail(err error, fe **FailError) bool {
	f, ok := err.(*FailError)
	*fe = f
	return ok
}
