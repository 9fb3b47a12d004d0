package bus

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/relaystation/relay/secret"
)

// ErrListenInUse reports that the embedded server's listen address is taken.
var ErrListenInUse = errors.New("listen address already in use")

// startEmbedded starts an in-process NATS server with JetStream storing under
// dataDir/nats and listening for other processes on listen ("host:port"; port 0
// or -1 picks a free one), requiring token from clients when it is set. The caller owns the server and shuts it down.
func startEmbedded(dataDir, listen string, token secret.Value, log *slog.Logger) (*server.Server, error) {
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("RELAY_NATS_LISTEN %q: %w", listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < -1 || port > 65535 {
		return nil, fmt.Errorf("RELAY_NATS_LISTEN %q: port must be a number from 0 to 65535", listen)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	if port > 0 {
		// nats-server reports a taken port only through its logger and then never
		// becomes ready; probe first so the error is immediate and says why.
		l, err := net.Listen("tcp", listen)
		if err != nil {
			return nil, fmt.Errorf("RELAY_NATS_LISTEN %s: %w (is another NATS server running? set NATS_URL to use it, or pick another address)", listen, ErrListenInUse)
		}
		_ = l.Close()
	}
	opts := &server.Options{
		ServerName: "relay-embedded",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   filepath.Join(dataDir, "nats"),
		NoSigs:     true,
		MaxPayload: 8 << 20,
		// A busy process (or a test run under the race detector on two cores)
		// can leave a client unread for more than the 2s default; the server
		// would then cut it off as a slow consumer and its in-flight deliveries
		// would wait out their ack wait.
		WriteDeadline: 10 * time.Second,
	}
	if token.IsSet() {
		// Without it any local process could publish relay.out.* and post as
		// the bot; with it every client must present the token.
		opts.Authorization = token.Reveal()
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	ns.SetLoggerV2(&natsLogger{log: log.With("component", "nats-server")}, false, false, false)
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("embedded nats: not listening on %s after 10s", listen)
	}
	return ns, nil
}

// natsLogger adapts slog to nats-server's Logger.
type natsLogger struct{ log *slog.Logger }

func (l *natsLogger) Noticef(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	if strings.Contains(msg, "Slow Consumer") {
		l.log.Warn(msg)
		return
	}
	l.log.Debug(msg)
}
func (l *natsLogger) Warnf(format string, v ...any)  { l.log.Warn(fmt.Sprintf(format, v...)) }
func (l *natsLogger) Fatalf(format string, v ...any) { l.log.Error(fmt.Sprintf(format, v...)) }
func (l *natsLogger) Errorf(format string, v ...any) { l.log.Error(fmt.Sprintf(format, v...)) }
func (l *natsLogger) Debugf(format string, v ...any) {}
func (l *natsLogger) Tracef(format string, v ...any) {}
