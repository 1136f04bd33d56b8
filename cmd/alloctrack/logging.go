package main

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/alecthomas/kingpin/v2"
	zaplogfmt "github.com/jsternberg/zap-logfmt"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"
	"go.uber.org/zap/zapcore"
)

type logFlags struct {
	level  *string
	format *string
}

func addLogFlags(c *kingpin.CmdClause) *logFlags {
	return &logFlags{
		level:  enum(c.Flag("log.level", "Only log messages with the given severity or above: debug, info, warn, error."), "log.level", "info", "debug", "info", "warn", "error"),
		format: enum(c.Flag("log.format", "Output format of log messages: logfmt or json."), "log.format", "logfmt", "logfmt", "json"),
	}
}

// newLogger builds a zap logger writing to w, and an slog logger over it for
// libraries that want one (exporter-toolkit).
func (f *logFlags) newLogger(w io.Writer) (*zap.Logger, *slog.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(*f.level)); err != nil {
		return nil, nil, fmt.Errorf("--log.level: %w", err)
	}
	ec := zapcore.EncoderConfig{
		TimeKey:        "ts",
		LevelKey:       "level",
		NameKey:        "logger",
		CallerKey:      "caller",
		MessageKey:     "msg",
		StacktraceKey:  "stacktrace",
		LineEnding:     zapcore.DefaultLineEnding,
		EncodeLevel:    zapcore.LowercaseLevelEncoder,
		EncodeTime:     zapcore.RFC3339NanoTimeEncoder,
		EncodeDuration: zapcore.StringDurationEncoder,
		EncodeCaller:   zapcore.ShortCallerEncoder,
	}
	var enc zapcore.Encoder
	if *f.format == "json" {
		enc = zapcore.NewJSONEncoder(ec)
	} else {
		enc = zaplogfmt.NewEncoder(ec)
	}
	core := zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl)
	log := zap.New(core, zap.AddCaller())
	return log, slog.New(zapslog.NewHandler(core)), nil
}
