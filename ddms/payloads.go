package ddms

import (
	"encoding/binary"
	"fmt"
)

// ClientProtocolVersion is the HELO version ddmlib sends.
const ClientProtocolVersion = 1

// EncodeHelloRequest returns the payload of a HELO request.
//
//	u32 client protocol version
func EncodeHelloRequest(version uint32) []byte {
	return binary.BigEndian.AppendUint32(nil, version)
}

// DecodeHelloRequest decodes a HELO request payload.
func DecodeHelloRequest(b []byte) (uint32, error) {
	d := decoder{what: "HELO request", b: b}
	v := d.u32("version")
	return v, d.err
}

// Hello is a VM's HELO reply.
//
//	u32 VM protocol version
//	u32 pid
//	u32 vm-ident length (UTF-16 units)
//	u32 app-name length (UTF-16 units)
//	vm-ident units, app-name units
//	then, each only if bytes remain, in this order:
//	  u32 user id
//	  string ABI            (u32 units + UTF-16BE)
//	  string JVM flags
//	  u8 native-debuggable  (1 = yes)
//	  string package name
type Hello struct {
	Version          uint32
	PID              uint32
	VMIdent          string
	AppName          string
	UserID           uint32
	ABI              string
	JVMFlags         string
	NativeDebuggable bool
	PackageName      string
	// Optional is how many of the five optional trailing fields are
	// present (0 for the oldest VMs, 5 for current ones).
	Optional int
}

// EncodeHello encodes a HELO reply payload with h.Optional trailing fields.
func EncodeHello(h *Hello) []byte {
	b := binary.BigEndian.AppendUint32(nil, h.Version)
	b = binary.BigEndian.AppendUint32(b, h.PID)
	b = binary.BigEndian.AppendUint32(b, uint32(UTF16Len(h.VMIdent)))
	b = binary.BigEndian.AppendUint32(b, uint32(UTF16Len(h.AppName)))
	b = AppendUTF16(b, h.VMIdent)
	b = AppendUTF16(b, h.AppName)
	if h.Optional >= 1 {
		b = binary.BigEndian.AppendUint32(b, h.UserID)
	}
	if h.Optional >= 2 {
		b = AppendString(b, h.ABI)
	}
	if h.Optional >= 3 {
		b = AppendString(b, h.JVMFlags)
	}
	if h.Optional >= 4 {
		v := byte(0)
		if h.NativeDebuggable {
			v = 1
		}
		b = append(b, v)
	}
	if h.Optional >= 5 {
		b = AppendString(b, h.PackageName)
	}
	return b
}

// DecodeHello decodes a HELO reply payload. Bytes after the last known
// optional field are ignored, as a newer VM may append more.
func DecodeHello(b []byte) (*Hello, error) {
	d := decoder{what: "HELO reply", b: b}
	h := &Hello{}
	h.Version = d.u32("version")
	h.PID = d.u32("pid")
	identLen := d.u32("vm-ident length")
	nameLen := d.u32("app-name length")
	h.VMIdent = d.chars("vm-ident", identLen)
	h.AppName = d.chars("app name", nameLen)
	if d.err == nil && d.left() > 0 {
		h.UserID = d.u32("user id")
		h.Optional = 1
	}
	if d.err == nil && d.left() > 0 {
		h.ABI = d.str("ABI")
		h.Optional = 2
	}
	if d.err == nil && d.left() > 0 {
		h.JVMFlags = d.str("JVM flags")
		h.Optional = 3
	}
	if d.err == nil && d.left() > 0 {
		h.NativeDebuggable = d.u8("native-debuggable") == 1
		h.Optional = 4
	}
	if d.err == nil && d.left() > 0 {
		h.PackageName = d.str("package name")
		h.Optional = 5
	}
	if d.err != nil {
		return nil, d.err
	}
	return h, nil
}

// EncodeFeatures encodes a FEAT reply payload.
//
//	u32 count, then count strings (u32 units + UTF-16BE)
func EncodeFeatures(features []string) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(features)))
	for _, f := range features {
		b = AppendString(b, f)
	}
	return b
}

// DecodeFeatures decodes a FEAT reply payload.
func DecodeFeatures(b []byte) ([]string, error) {
	d := decoder{what: "FEAT reply", b: b}
	n := d.u32("feature count")
	// Each string takes at least its 4-byte length.
	if d.err == nil && uint64(n)*4 > uint64(d.left()) {
		return nil, fmt.Errorf("%w FEAT reply: %d features need at least %d bytes, %d left", ErrMalformed, n, uint64(n)*4, d.left())
	}
	out := make([]string, 0, n)
	for i := uint32(0); i < n && d.err == nil; i++ {
		out = append(out, d.str(fmt.Sprintf("feature %d", i)))
	}
	if d.err != nil {
		return nil, d.err
	}
	return out, nil
}

// AppName is an APNM chunk, sent by the VM when its app is named.
//
//	string app name
//	u32 user id           (optional, newer VMs)
//	string package name   (optional, newer still)
type AppName struct {
	Name        string
	UserID      uint32
	PackageName string
	// Optional is how many of the two optional fields are present (0-2).
	Optional int
}

// EncodeAppName encodes an APNM payload with a.Optional trailing fields.
func EncodeAppName(a *AppName) []byte {
	b := AppendString(nil, a.Name)
	if a.Optional >= 1 {
		b = binary.BigEndian.AppendUint32(b, a.UserID)
	}
	if a.Optional >= 2 {
		b = AppendString(b, a.PackageName)
	}
	return b
}

// DecodeAppName decodes an APNM payload of any of its three lengths.
func DecodeAppName(b []byte) (*AppName, error) {
	d := decoder{what: "APNM", b: b}
	a := &AppName{Name: d.str("app name")}
	if d.err == nil && d.left() > 0 {
		a.UserID = d.u32("user id")
		a.Optional = 1
	}
	if d.err == nil && d.left() > 0 {
		a.PackageName = d.str("package name")
		a.Optional = 2
	}
	if d.err != nil {
		return nil, d.err
	}
	return a, nil
}

// WaitForDebugger is the WAIT reason of an app waiting for a debugger.
const WaitForDebugger = 0

// EncodeWait encodes a WAIT payload: u8 reason.
func EncodeWait(reason uint8) []byte { return []byte{reason} }

// DecodeWait decodes a WAIT payload.
func DecodeWait(b []byte) (uint8, error) {
	d := decoder{what: "WAIT", b: b}
	r := d.u8("reason")
	return r, d.err
}

// EncodeBool encodes the one-byte payload of REAE (request) and REAQ (reply).
func EncodeBool(on bool) []byte {
	if on {
		return []byte{1}
	}
	return []byte{0}
}

// DecodeBool decodes a REAE request or REAQ reply payload. Any non-zero
// byte is true, as in the VM.
func DecodeBool(what string, b []byte) (bool, error) {
	d := decoder{what: what, b: b}
	v := d.u8("flag")
	return v != 0, d.err
}

// HeapInfo is one heap of an HPIF chunk.
type HeapInfo struct {
	ID               uint32
	TimestampMillis  uint64
	Reason           uint8
	MaxSize          uint32
	Size             uint32
	BytesAllocated   uint32
	ObjectsAllocated uint32
}

const heapInfoLen = 4 + 8 + 1 + 4*4

// EncodeHeapInfo encodes an HPIF payload.
//
//	u32 heap count, then per heap:
//	u32 id, u64 timestamp ms, u8 reason, u32 max size, u32 size,
//	u32 bytes allocated, u32 objects allocated
func EncodeHeapInfo(heaps []HeapInfo) []byte {
	b := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(heaps)*heapInfoLen), uint32(len(heaps)))
	for _, h := range heaps {
		b = binary.BigEndian.AppendUint32(b, h.ID)
		b = binary.BigEndian.AppendUint64(b, h.TimestampMillis)
		b = append(b, h.Reason)
		b = binary.BigEndian.AppendUint32(b, h.MaxSize)
		b = binary.BigEndian.AppendUint32(b, h.Size)
		b = binary.BigEndian.AppendUint32(b, h.BytesAllocated)
		b = binary.BigEndian.AppendUint32(b, h.ObjectsAllocated)
	}
	return b
}

// DecodeHeapInfo decodes an HPIF payload.
func DecodeHeapInfo(b []byte) ([]HeapInfo, error) {
	d := decoder{what: "HPIF", b: b}
	n := d.u32("heap count")
	if d.err != nil {
		return nil, d.err
	}
	if uint64(n)*heapInfoLen != uint64(d.left()) {
		return nil, fmt.Errorf("%w HPIF: %d heaps need %d bytes, %d follow the count", ErrMalformed, n, uint64(n)*heapInfoLen, d.left())
	}
	out := make([]HeapInfo, n)
	for i := range out {
		h := &out[i]
		h.ID = d.u32("heap id")
		h.TimestampMillis = d.u64("timestamp")
		h.Reason = d.u8("reason")
		h.MaxSize = d.u32("max size")
		h.Size = d.u32("size")
		h.BytesAllocated = d.u32("bytes allocated")
		h.ObjectsAllocated = d.u32("objects allocated")
	}
	return out, d.err
}

// FailError is a FAIL chunk: the VM refused a request.
//
//	u32 error code
//	string message
type FailError struct {
	Code    uint32
	Message string
}

func (e *FailError) Error() string {
	return fmt.Sprintf("ddms: VM failed the request: code %d: %s", e.Code, e.Message)
}

// EncodeFail encodes a FAIL payload.
func EncodeFail(e *FailError) []byte {
	return AppendString(binary.BigEndian.AppendUint32(nil, e.Code), e.Message)
}

// DecodeFail decodes a FAIL payload.
func DecodeFail(b []byte) (*FailError, error) {
	d := decoder{what: "FAIL", b: b}
	e := &FailError{Code: d.u32("error code")}
	e.Message = d.str("message")
	if d.err != nil {
		return nil, d.err
	}
	return e, nil
}

// EncodeHeapDumpFile encodes an HPDU request: u4 length in UTF-16 units,
// then the file name in UTF-16 (android/ddm/DdmHandleHeap.java). The app
// itself opens the file, so it must be a path the app may write. The VM
// answers an HPDU chunk of one byte, HeapDumpOK or HeapDumpFailed.
func EncodeHeapDumpFile(path string) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(UTF16Len(path)))
	return AppendUTF16(b, path)
}

// DecodeHeapDumpFile decodes an HPDU request.
func DecodeHeapDumpFile(b []byte) (string, error) {
	d := decoder{what: "HPDU", b: b}
	s := d.str("file name")
	if d.err == nil && d.left() != 0 {
		return "", fmt.Errorf("%w HPDU: %d bytes after the file name (payload length %d)", ErrMalformed, d.left(), len(b))
	}
	return s, d.err
}

// HPDU results.
const (
	HeapDumpOK     = 0
	HeapDumpFailed = 0xFF
)
