package cli

import (
	"cmp"
	"context"
	"io"
	"log/slog"

	"github.com/sirupsen/logrus"
)

// routeLogrus sends what libraries log through logrus's standard logger
// (compose-go's dotenv warns there of an undefined ${VAR} in an mcp.json
// envFile) through log instead of as logrus text on stderr, so the
// process's stderr carries the relay's own log lines only (JSON with
// RELAY_LOG_FORMAT=json). The standard logger is the process's: the last
// call wins.
func routeLogrus(log *slog.Logger) {
	std := logrus.StandardLogger()
	std.SetOutput(io.Discard)
	hooks := logrus.LevelHooks{}
	hooks.Add(logrusHook{log: log})
	std.ReplaceHooks(hooks) // in one step: concurrent calls leave one hook
}

// logrusHook logs a logrus entry with log, at the matching level.
type logrusHook struct{ log *slog.Logger }

func (logrusHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h logrusHook) Fire(e *logrus.Entry) error {
	level := slog.LevelInfo
	switch {
	case e.Level <= logrus.ErrorLevel:
		level = slog.LevelError
	case e.Level == logrus.WarnLevel:
		level = slog.LevelWarn
	case e.Level >= logrus.DebugLevel:
		level = slog.LevelDebug
	}
	args := make([]any, 0, 2+2*len(e.Data))
	args = append(args, "logger", "logrus")
	for k, v := range e.Data {
		args = append(args, k, v)
	}
	h.log.Log(cmp.Or[context.Context](e.Context, context.Background()), level, e.Message, args...)
	return nil
}
