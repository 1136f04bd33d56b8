package allocreport

import (
	"strconv"
	"unicode/utf8"
)

// AppendJSON appends allocation i of r as one JSON object, without a
// newline, in the form of `alloctrack report --format jsonl`:
//
//	{"num":5000,"class":"java.lang.Object[]","size":16,"thread":3311,
//	 "frames":[{"class":"java.util.Arrays","method":"copyOf","file":"Arrays.java","line":3139}]}
//
// Size and thread are unsigned, as on the wire; names are dotted.
func (r *Report) AppendJSON(dst []byte, i int) []byte {
	a := &r.Allocations[i]
	dst = append(dst, `{"num":`...)
	dst = strconv.AppendInt(dst, int64(r.Num(i)), 10)
	dst = append(dst, `,"class":`...)
	dst = appendJSONString(dst, r.Classes[a.Class])
	dst = append(dst, `,"size":`...)
	dst = strconv.AppendUint(dst, uint64(a.Size), 10)
	dst = append(dst, `,"thread":`...)
	dst = strconv.AppendUint(dst, uint64(a.Thread), 10)
	dst = append(dst, `,"frames":[`...)
	for j, f := range r.Stack(a).All() {
		if j > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"class":`...)
		dst = appendJSONString(dst, r.Classes[f.Class])
		dst = append(dst, `,"method":`...)
		dst = appendJSONString(dst, r.Methods[f.Method])
		dst = append(dst, `,"file":`...)
		dst = appendJSONString(dst, r.Files[f.File])
		dst = append(dst, `,"line":`...)
		dst = strconv.AppendInt(dst, int64(f.Line), 10)
		dst = append(dst, '}')
	}
	return append(dst, "]}"...)
}

const hexDigits = "0123456789abcdef"

// appendJSONString quotes s for JSON: '"' and '\\' escaped, control
// characters as \u00XX, everything else as UTF-8 (invalid bytes as U+FFFD).
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		dst = utf8.AppendRune(dst, r)
		i += n
	}
	return append(dst, '"')
}
