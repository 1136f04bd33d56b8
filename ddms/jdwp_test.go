package ddms_test

import (
	"context"
	"net"
	"testing"

	"go.uber.org/goleak"

	"github.com/alloctrack/alloctrack/ddms"
	"github.com/alloctrack/alloctrack/jdwp"

	"github.com/alloctrack/alloctrack/internal/testwait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var _ ddms.Transport = (*jdwp.Conn)(nil)

// TestOverJDWP runs the client over a real jdwp.Conn against a VM that
// answers HELO and REAQ and sends an unsolicited APNM first.
func TestOverJDWP(t *testing.T) {
	client, vm := net.Pipe()
	defer vm.Close()
	errc := make(chan error, 1)
	go func() {
		errc <- func() error {
			if err := jdwp.ServerHandshake(context.Background(), vm); err != nil {
				return err
			}
			apnm := ddms.EncodeChunk(ddms.APNM, ddms.EncodeAppName(&ddms.AppName{Name: "com.example"}))
			if err := jdwp.WritePacket(vm, &jdwp.Packet{ID: 0x80000001, CommandSet: ddms.CommandSet, Command: ddms.Command, Data: apnm}); err != nil {
				return err
			}
			for {
				p, err := jdwp.ReadPacket(vm, 0)
				if err != nil {
					return nil
				}
				ch, err := ddms.DecodeChunk(p.Data)
				if err != nil {
					return err
				}
				var reply []byte
				switch ch.Type {
				case ddms.HELO:
					reply = ddms.EncodeChunk(ddms.HELO, ddms.EncodeHello(&ddms.Hello{Version: 1, PID: 77, VMIdent: "Dalvik v2.1.0", AppName: "com.example", Optional: 5}))
				case ddms.REAQ:
					reply = ddms.EncodeChunk(ddms.REAQ, []byte{0})
				case ddms.REAE:
					continue // Android 9-11: no reply
				}
				if err := jdwp.WritePacket(vm, &jdwp.Packet{ID: p.ID, Flags: jdwp.FlagReply, Data: reply}); err != nil {
					return err
				}
			}
		}()
	}()
	names := make(chan string, 1)
	conn, err := jdwp.Open(context.Background(), client, jdwp.Options{OnCommand: func(p jdwp.Packet) {
		if !ddms.IsDDM(p.CommandSet, p.Command) {
			return
		}
		if ch, err := ddms.DecodeChunk(p.Data); err == nil && ch.Type == ddms.APNM {
			if a, err := ddms.DecodeAppName(ch.Data); err == nil {
				names <- a.Name
			}
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := ddms.NewClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Bound)
	defer cancel()
	h, err := c.Hello(ctx)
	if err != nil || h.PID != 77 || h.Optional != 5 {
		t.Fatalf("HELO %+v %v", h, err)
	}
	if err := c.SetAllocTracking(true); err != nil {
		t.Fatal(err)
	}
	on, err := c.AllocTracking(ctx)
	if err != nil || on {
		t.Fatalf("REAQ %v %v", on, err)
	}
	select {
	case n := <-names:
		if n != "com.example" {
			t.Fatalf("APNM %q", n)
		}
	case <-ctx.Done():
		t.Fatal("no APNM delivered")
	}
	conn.Close()
	vm.Close()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
