package sim

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/alloctrack/alloctrack/perfetto"
)

// parseTextConfig reads a trace config in protobuf text format, as
// perfetto --txt does, as far as a heapprofd session goes: the fields of
// TraceConfig, DataSourceConfig and HeapprofdConfig that the simulated
// perfetto acts on, and a few it accepts and ignores. An unknown field is
// an error, as it is for perfetto.
func parseTextConfig(s string) (*perfetto.HeapprofdSession, error) {
	t := &textLexer{s: s}
	root, err := t.message(false)
	if err != nil {
		return nil, err
	}
	c := &perfetto.HeapprofdSession{}
	found := false
	err = root.each("TraceConfig", map[string]func(*textValue) error{
		"buffers": func(v *textValue) error {
			return v.msg.each("BufferConfig", map[string]func(*textValue) error{
				"size_kb":     func(v *textValue) error { return v.uint32(&c.BufferKB) },
				"fill_policy": ignore,
			})
		},
		"data_sources": func(v *textValue) error {
			return v.msg.each("DataSource", map[string]func(*textValue) error{
				"config": func(v *textValue) error {
					var name string
					var hp *textMsg
					if err := v.msg.each("DataSourceConfig", map[string]func(*textValue) error{
						"name":             func(v *textValue) error { return v.str(&name) },
						"target_buffer":    ignore,
						"heapprofd_config": func(v *textValue) error { hp = v.msg; return v.need() },
					}); err != nil {
						return err
					}
					if name != "android.heapprofd" || hp == nil || found {
						return nil
					}
					found = true
					return hp.each("HeapprofdConfig", map[string]func(*textValue) error{
						"sampling_interval_bytes": func(v *textValue) error { return v.uint64(&c.SamplingInterval) },
						"process_cmdline": func(v *textValue) error {
							var s string
							err := v.str(&s)
							c.ProcessCmdlines = append(c.ProcessCmdlines, s)
							return err
						},
						"pid": func(v *textValue) error {
							var p uint64
							err := v.uint64(&p)
							c.PIDs = append(c.PIDs, p)
							return err
						},
						"heaps": func(v *textValue) error {
							var s string
							err := v.str(&s)
							c.Heaps = append(c.Heaps, s)
							return err
						},
						"shmem_size_bytes":        func(v *textValue) error { return v.uint64(&c.ShmemSize) },
						"block_client":            func(v *textValue) error { return v.bool(&c.BlockClient) },
						"block_client_timeout_us": func(v *textValue) error { return v.uint32(&c.BlockClientTimeoutUS) },
						"continuous_dump_config": func(v *textValue) error {
							return v.msg.each("ContinuousDumpConfig", map[string]func(*textValue) error{
								"dump_phase_ms":    func(v *textValue) error { return v.uint32(&c.DumpPhaseMS) },
								"dump_interval_ms": func(v *textValue) error { return v.uint32(&c.DumpIntervalMS) },
							})
						},
						"no_startup": ignore, "no_running": ignore, "all_heaps": ignore,
					})
				},
			})
		},
		"duration_ms":          func(v *textValue) error { return v.uint32(&c.DurationMS) },
		"write_into_file":      func(v *textValue) error { return v.bool(&c.WriteIntoFile) },
		"file_write_period_ms": func(v *textValue) error { return v.uint32(&c.FileWritePeriodMS) },
		"flush_timeout_ms":     func(v *textValue) error { return v.uint32(&c.FlushTimeoutMS) },
		"flush_period_ms":      func(v *textValue) error { return v.uint32(&c.FlushPeriodMS) },
		"max_file_size_bytes":  func(v *textValue) error { return v.uint64(&c.MaxFileSizeBytes) },
		"unique_session_name":  func(v *textValue) error { return v.str(&c.UniqueSessionName) },
		"output_path":          func(v *textValue) error { return v.str(&c.OutputPath) },
	})
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, perfetto.ErrNoHeapprofd
	}
	return c, nil
}

func ignore(*textValue) error { return nil }

// textMsg is a parsed message: its fields in order.
type textMsg struct{ fields []textValue }

// textValue is one field: a scalar (its token) or a message.
type textValue struct {
	name   string
	scalar string
	quoted bool
	msg    *textMsg
	line   int
}

func (m *textMsg) each(typ string, fns map[string]func(*textValue) error) error {
	for i := range m.fields {
		v := &m.fields[i]
		fn, ok := fns[v.name]
		if !ok {
			return fmt.Errorf("line %d: message type \"perfetto.protos.%s\" has no field named \"%s\"", v.line, typ, v.name)
		}
		if err := fn(v); err != nil {
			return err
		}
	}
	return nil
}

func (v *textValue) need() error {
	if v.msg == nil {
		return fmt.Errorf("line %d: %s: expected a message", v.line, v.name)
	}
	return nil
}

func (v *textValue) str(dst *string) error {
	if v.msg != nil || !v.quoted {
		return fmt.Errorf("line %d: %s: expected a string", v.line, v.name)
	}
	*dst = v.scalar
	return nil
}

func (v *textValue) uint64(dst *uint64) error {
	n, err := strconv.ParseUint(v.scalar, 0, 64)
	if v.msg != nil || v.quoted || err != nil {
		return fmt.Errorf("line %d: %s: expected an unsigned integer, got %q", v.line, v.name, v.scalar)
	}
	*dst = n
	return nil
}

func (v *textValue) uint32(dst *uint32) error {
	var n uint64
	if err := v.uint64(&n); err != nil {
		return err
	}
	if n > 1<<32-1 {
		return fmt.Errorf("line %d: %s: %d is out of range", v.line, v.name, n)
	}
	*dst = uint32(n)
	return nil
}

func (v *textValue) bool(dst *bool) error {
	switch {
	case v.msg == nil && !v.quoted && (v.scalar == "true" || v.scalar == "1"):
		*dst = true
	case v.msg == nil && !v.quoted && (v.scalar == "false" || v.scalar == "0"):
		*dst = false
	default:
		return fmt.Errorf("line %d: %s: expected true or false", v.line, v.name)
	}
	return nil
}

// textLexer reads protobuf text format: name: scalar, name { … } or
// name: { … }, with # comments, separated by blanks, commas or
// semicolons. Strings are in double or single quotes with C escapes.
type textLexer struct {
	s    string
	i    int
	line int
}

func (t *textLexer) skip() {
	for t.i < len(t.s) {
		switch c := t.s[t.i]; {
		case c == '\n':
			t.line++
			t.i++
		case c == ' ' || c == '\t' || c == '\r' || c == ',' || c == ';':
			t.i++
		case c == '#':
			for t.i < len(t.s) && t.s[t.i] != '\n' {
				t.i++
			}
		default:
			return
		}
	}
}

func (t *textLexer) errf(format string, args ...any) error {
	return fmt.Errorf("line %d: "+format, append([]any{t.line + 1}, args...)...)
}

func (t *textLexer) message(nested bool) (*textMsg, error) {
	m := &textMsg{}
	for {
		t.skip()
		if t.i >= len(t.s) {
			if nested {
				return nil, t.errf("expected }")
			}
			return m, nil
		}
		if t.s[t.i] == '}' {
			if !nested {
				return nil, t.errf("unexpected }")
			}
			t.i++
			return m, nil
		}
		start := t.i
		for t.i < len(t.s) && (isIdent(t.s[t.i])) {
			t.i++
		}
		if start == t.i {
			return nil, t.errf("expected a field name, got %q", t.s[t.i:t.i+1])
		}
		v := textValue{name: t.s[start:t.i], line: t.line + 1}
		t.skip()
		colon := t.i < len(t.s) && t.s[t.i] == ':'
		if colon {
			t.i++
			t.skip()
		}
		switch {
		case t.i < len(t.s) && t.s[t.i] == '{':
			t.i++
			sub, err := t.message(true)
			if err != nil {
				return nil, err
			}
			v.msg = sub
		case !colon:
			return nil, t.errf("expected : or { after %s", v.name)
		case t.i < len(t.s) && (t.s[t.i] == '"' || t.s[t.i] == '\''):
			s, err := t.quoted()
			if err != nil {
				return nil, err
			}
			v.scalar, v.quoted = s, true
		default:
			start := t.i
			for t.i < len(t.s) && (isIdent(t.s[t.i]) || t.s[t.i] == '-' || t.s[t.i] == '.') {
				t.i++
			}
			if start == t.i {
				return nil, t.errf("expected a value for %s", v.name)
			}
			v.scalar = t.s[start:t.i]
		}
		m.fields = append(m.fields, v)
	}
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func (t *textLexer) quoted() (string, error) {
	q := t.s[t.i]
	t.i++
	var b strings.Builder
	for t.i < len(t.s) {
		c := t.s[t.i]
		t.i++
		switch {
		case c == q:
			return b.String(), nil
		case c == '\n':
			return "", t.errf("newline in a string")
		case c == '\\' && t.i < len(t.s):
			e := t.s[t.i]
			t.i++
			switch e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			default:
				b.WriteByte(e)
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", t.errf("unterminated string")
}
