package adb

import (
	"context"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// ErrTrackAppUnsupported: the device refused track-app, as adbd before
// Android 12 (API 31) does with every service it does not know, and as
// adbd in recovery does (docs/track-app.md). It comes wrapped together
// with the server's *FailError, so ErrServiceClosed matches too.
var ErrTrackAppUnsupported = errors.New("adb: the device does not offer track-app (Android 12 and later do)")

// AppProcess is one process in a track-app list: an app process that is
// debuggable or profileable from the shell (docs/track-app.md).
//
// Android 12 to 14 send only PID, Debuggable, Profileable and
// Architecture; the other fields are in adbd from Android 15 on and keep
// their zero values when a device does not send them.
type AppProcess struct {
	PID          int
	Debuggable   bool   // reachable over jdwp:<pid>
	Profileable  bool   // profileable from the shell; debuggable apps are too
	Architecture string // the VM's instruction set, e.g. "arm64"

	UserID             int // the Android user (0 is the owner)
	ProcessName        string
	PackageNames       []string // in no particular order
	WaitingForDebugger bool
	UID                int
}

// Field numbers of adbd's app_processes.proto (docs/track-app.md).
const (
	fieldAppProcessesProcess = 1 // AppProcesses.process, repeated ProcessEntry

	fieldPID                = 1 // int64
	fieldDebuggable         = 2 // bool
	fieldProfileable        = 3 // bool
	fieldArchitecture       = 4 // string
	fieldUserID             = 5 // optional int64, Android 15+
	fieldProcessName        = 6 // optional string, Android 15+
	fieldPackageNames       = 7 // repeated string, Android 15+
	fieldWaitingForDebugger = 8 // optional bool, Android 15+
	fieldUID                = 9 // optional int64, Android 15+
)

// ParseAppProcesses decodes one track-app list: a binary AppProcesses
// protobuf message (the bytes after the 4 hex digits of length). An empty
// message is an empty list (nil). Fields it does not know are skipped, as
// protobuf readers do, so lists from later adbd versions still decode.
// Anything else it cannot read is an error wrapping ErrProtocol that says
// which process and which byte; it never panics.
//
// Layout (protobuf wire format; a tag is the varint field<<3 | wire type,
// varints are base 128, low group first):
//
//	AppProcesses := { 0x0a len ProcessEntry }  field 1, length-delimited, repeated
//	ProcessEntry := fields in any order; a scalar given twice keeps the last
//	  0x08 varint     1 pid (int64); required here, 1 to 2^31-1
//	  0x10 varint     2 debuggable (bool; adbd leaves it out when false)
//	  0x18 varint     3 profileable (bool; left out when false)
//	  0x22 len bytes  4 architecture (UTF-8)
//	  0x28 varint     5 user_id (int64)                     Android 15+
//	  0x32 len bytes  6 process_name (UTF-8)                Android 15+
//	  0x3a len bytes  7 package_names (UTF-8), repeated     Android 15+
//	  0x40 varint     8 waiting_for_debugger (bool)         Android 15+
//	  0x48 varint     9 uid (int64)                         Android 15+
func ParseAppProcesses(b []byte) ([]AppProcess, error) {
	// First pass: check the outer message and count the processes, so
	// that the list is allocated once, at its final size. Each process
	// takes at least 2 bytes of b, so the count is bounded by len(b)/2.
	n := 0
	for off := 0; off < len(b); {
		f, err := consumeField(b, off, "app process list", 0)
		if err != nil {
			return nil, err
		}
		if f.num == fieldAppProcessesProcess {
			if f.typ != protowire.BytesType {
				return nil, wireTypeError("app process list", off, "process", f.typ, protowire.BytesType)
			}
			n++
		}
		off += f.len
	}
	if n == 0 {
		return nil, nil
	}
	out := make([]AppProcess, 0, n)
	for off := 0; off < len(b); {
		f, _ := consumeField(b, off, "app process list", 0) // checked above
		if f.num == fieldAppProcessesProcess {
			v, start := f.bytes(b, off)
			p, err := parseProcessEntry(v, start, len(out)+1)
			if err != nil {
				return nil, err
			}
			out = append(out, p)
		}
		off += f.len
	}
	return out, nil
}

// parseProcessEntry decodes one ProcessEntry; base is its offset in the
// whole list and idx its 1-based position, both for errors.
func parseProcessEntry(b []byte, base, idx int) (AppProcess, error) {
	var p AppProcess
	what := fmt.Sprintf("app process list: process %d", idx)
	havePID := false
	for off := 0; off < len(b); {
		f, err := consumeField(b, off, what, base)
		if err != nil {
			return AppProcess{}, err
		}
		at := base + off
		switch f.num {
		case fieldPID, fieldDebuggable, fieldProfileable, fieldUserID, fieldWaitingForDebugger, fieldUID:
			if f.typ != protowire.VarintType {
				return AppProcess{}, wireTypeError(what, at, fieldName(f.num), f.typ, protowire.VarintType)
			}
			v, _ := protowire.ConsumeVarint(b[off+f.tagLen:])
			s := int64(v) // the int64 fields are plain varints: negatives take 10 bytes
			switch f.num {
			case fieldPID:
				if s <= 0 || s > math.MaxInt32 { // a Linux pid is a positive int32
					return AppProcess{}, fmt.Errorf("%w: %s: pid %d at byte %d is not a process id", ErrProtocol, what, s, at)
				}
				p.PID, havePID = int(s), true
			case fieldDebuggable:
				p.Debuggable = v != 0
			case fieldProfileable:
				p.Profileable = v != 0
			case fieldWaitingForDebugger:
				p.WaitingForDebugger = v != 0
			case fieldUserID, fieldUID:
				if int64(int(s)) != s {
					return AppProcess{}, fmt.Errorf("%w: %s: %s %d at byte %d does not fit an int", ErrProtocol, what, fieldName(f.num), s, at)
				}
				if f.num == fieldUID {
					p.UID = int(s)
				} else {
					p.UserID = int(s)
				}
			}
		case fieldArchitecture, fieldProcessName, fieldPackageNames:
			if f.typ != protowire.BytesType {
				return AppProcess{}, wireTypeError(what, at, fieldName(f.num), f.typ, protowire.BytesType)
			}
			v, _ := f.bytes(b, off)
			if !utf8.Valid(v) {
				return AppProcess{}, fmt.Errorf("%w: %s: %s at byte %d is not UTF-8", ErrProtocol, what, fieldName(f.num), at)
			}
			switch f.num {
			case fieldArchitecture:
				p.Architecture = string(v)
			case fieldProcessName:
				p.ProcessName = string(v)
			case fieldPackageNames:
				p.PackageNames = append(p.PackageNames, string(v))
			}
		}
		off += f.len
	}
	if !havePID {
		return AppProcess{}, fmt.Errorf("%w: %s (bytes %d to %d): no pid", ErrProtocol, what, base, base+len(b))
	}
	return p, nil
}

// field is one checked field of a message.
type field struct {
	num    protowire.Number
	typ    protowire.Type
	tagLen int // bytes of the tag
	len    int // bytes of the whole field, tag included
}

// bytes returns the contents of a length-delimited field that starts at
// b[off:], and their offset in b.
func (f field) bytes(b []byte, off int) ([]byte, int) {
	v, _ := protowire.ConsumeBytes(b[off+f.tagLen : off+f.len])
	return v, off + f.len - len(v)
}

// consumeField checks the field that starts at b[off:]: its tag, and that
// its value lies within b. base is b's offset in the whole list, for
// errors. Groups are refused: proto3, which app_processes.proto is, has
// none.
func consumeField(b []byte, off int, what string, base int) (field, error) {
	num, typ, tagLen := protowire.ConsumeTag(b[off:])
	if tagLen < 0 {
		return field{}, fmt.Errorf("%w: %s: field tag at byte %d: %v", ErrProtocol, what, base+off, protowire.ParseError(tagLen))
	}
	if typ == protowire.StartGroupType || typ == protowire.EndGroupType {
		return field{}, fmt.Errorf("%w: %s: field %d at byte %d is a group, which proto3 does not have", ErrProtocol, what, num, base+off)
	}
	valLen := protowire.ConsumeFieldValue(num, typ, b[off+tagLen:])
	if valLen < 0 {
		return field{}, fmt.Errorf("%w: %s: field %d (wire type %d) at byte %d, %d bytes left: %v",
			ErrProtocol, what, num, typ, base+off, len(b)-off, protowire.ParseError(valLen))
	}
	return field{num: num, typ: typ, tagLen: tagLen, len: tagLen + valLen}, nil
}

func wireTypeError(what string, at int, name string, got, want protowire.Type) error {
	return fmt.Errorf("%w: %s: %s at byte %d has wire type %d, want %d", ErrProtocol, what, name, at, got, want)
}

func fieldName(num protowire.Number) string {
	switch num {
	case fieldPID:
		return "pid"
	case fieldDebuggable:
		return "debuggable"
	case fieldProfileable:
		return "profileable"
	case fieldArchitecture:
		return "architecture"
	case fieldUserID:
		return "user_id"
	case fieldProcessName:
		return "process_name"
	case fieldPackageNames:
		return "package_names"
	case fieldWaitingForDebugger:
		return "waiting_for_debugger"
	case fieldUID:
		return "uid"
	}
	return fmt.Sprintf("field %d", num)
}

// TrackApp follows track-app on a device (Android 12 and later), calling
// fn with each list of the processes that are debuggable or profileable,
// until ctx ends or the stream breaks. adbd sends the list at once and
// again whenever such a process starts or ends (Android 15 also when one's
// details change); a list equal to the last is dropped. A device that
// does not offer the service ends the call with ErrTrackAppUnsupported; a
// list it cannot decode, with ErrProtocol.
func (c *Client) TrackApp(ctx context.Context, serial string, fn func([]AppProcess)) error {
	cn, err := c.transport(ctx, serial, true)
	if err != nil {
		return err
	}
	defer cn.Close()
	if err := cn.send("track-app"); err != nil {
		if errors.Is(err, ErrServiceClosed) {
			return fmt.Errorf("%w: %s: %w", ErrTrackAppUnsupported, serial, err)
		}
		return err
	}
	var last lastList
	for {
		b, err := cn.nextList("app process list", &last)
		if err != nil {
			return err
		}
		list, err := ParseAppProcesses(b)
		if err != nil {
			return fmt.Errorf("adb: %s: track-app: %w", serial, err)
		}
		fn(list)
	}
}
