package ddms

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// JDWP command set and command that carry DDM chunks.
const (
	CommandSet = 0xC7
	Command    = 0x01
)

// ChunkHeaderLen is the length of a chunk header: type and length.
const ChunkHeaderLen = 8

// Type is a chunk type: four ASCII letters read as a big-endian u32.
type Type uint32

// TypeOf returns the Type for a four-letter name. It panics on another
// length: it is meant for constants.
func TypeOf(name string) Type {
	if len(name) != 4 {
		panic("ddms: chunk type must have four letters: " + name)
	}
	return Type(binary.BigEndian.Uint32([]byte(name)))
}

func (t Type) String() string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(t))
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return fmt.Sprintf("%#08x", uint32(t))
		}
	}
	return string(b[:])
}

// Chunk types used by the project.
var (
	HELO = TypeOf("HELO")
	FEAT = TypeOf("FEAT")
	APNM = TypeOf("APNM")
	WAIT = TypeOf("WAIT")
	REAE = TypeOf("REAE")
	REAQ = TypeOf("REAQ")
	REAL = TypeOf("REAL")
	HPIF = TypeOf("HPIF")
	HPDU = TypeOf("HPDU") // heap dump to a file the app writes (Android 3–11)
	HPDS = TypeOf("HPDS") // heap dump streamed back over DDM (Android 3–11)
	FAIL = TypeOf("FAIL")
)

// ErrMalformed is wrapped by every error about bytes that do not form a
// valid chunk or payload.
var ErrMalformed = errors.New("ddms: malformed")

// ErrEmptyReply means the VM answered with a JDWP reply carrying no chunk,
// as ART does for REAE up to Android 8.1 and, with the full JDWP agent
// loaded, for the allocation-tracker chunks on Android 12+.
var ErrEmptyReply = errors.New("ddms: empty reply")

// Chunk is one DDM chunk.
//
//	offset  size  field
//	0       4     type (four ASCII letters)
//	4       4     length of data
//	8       n     data
type Chunk struct {
	Type Type
	Data []byte
}

// AppendChunk appends the encoded chunk to dst.
func AppendChunk(dst []byte, t Type, data []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(t))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(data)))
	return append(dst, data...)
}

// EncodeChunk returns the encoded chunk in a new buffer.
func EncodeChunk(t Type, data []byte) []byte {
	return AppendChunk(make([]byte, 0, ChunkHeaderLen+len(data)), t, data)
}

// DecodeChunk decodes the data of a DDM packet. The declared chunk length
// must equal the bytes that follow the header. Data aliases b.
func DecodeChunk(b []byte) (Chunk, error) {
	if len(b) < ChunkHeaderLen {
		return Chunk{}, fmt.Errorf("%w chunk: %d bytes, shorter than the %d-byte header", ErrMalformed, len(b), ChunkHeaderLen)
	}
	t := Type(binary.BigEndian.Uint32(b))
	n := binary.BigEndian.Uint32(b[4:])
	if uint64(n) != uint64(len(b)-ChunkHeaderLen) {
		return Chunk{}, fmt.Errorf("%w %v chunk: declared length %d, but %d bytes follow the header", ErrMalformed, t, n, len(b)-ChunkHeaderLen)
	}
	return Chunk{Type: t, Data: b[ChunkHeaderLen:]}, nil
}

// IsDDM tells whether a JDWP command set and command carry a DDM chunk.
func IsDDM(cmdSet, cmd uint8) bool { return cmdSet == CommandSet && cmd == Command }
