package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/bits"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/internal/httpserver"
	"github.com/relaystation/relay/internal/telemetry"
	"github.com/relaystation/relay/mappers"
)

// publishShare is the part of a provider's deadline the gateway spends
// waiting for acknowledgements; the rest covers reading, mapping and
// answering, so a 503 reaches the provider before it gives up.
const publishShare = 0.85

// outcome is how one request ended: its status, the body to write and, for
// failures, why (logged by the handler, never sent to the client).
type outcome struct {
	status int
	reply  *mappers.Reply
	msg    string
	err    error
	level  slog.Level
	stored int
	dups   int
	// event, delivery and thread are those of the first envelope stored,
	// for the accepted line.
	event, delivery, thread string
	// body is the request's body buffer, given back to growPool once the
	// answer is written (nothing of the request outlives the handler).
	body []byte
}

func (s *Service) handler(rt *route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		var span trace.Span
		if telemetry.Enabled() {
			var ctx context.Context
			ctx, span = telemetry.ServerSpan(r, rt.path)
			r = r.WithContext(ctx)
		}
		o := s.serve(w, r, rt, start)
		telemetry.EndServer(span, o.status)
		if o.status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", http.MethodPost)
		}
		if o.status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		if o.reply != nil {
			if o.reply.ContentType != "" {
				w.Header().Set("Content-Type", o.reply.ContentType)
			}
			w.WriteHeader(o.status)
			_, _ = w.Write(o.reply.Body)
		} else {
			h := w.Header()
			h["Content-Type"], h["X-Content-Type-Options"] = plainText, noSniff
			w.WriteHeader(o.status)
			if o.msg == okText {
				_, _ = w.Write(okAnswer)
			} else {
				_, _ = io.WriteString(w, o.msg)
				_, _ = io.WriteString(w, "\n")
			}
		}
		s.metrics.observe(rt, o, time.Since(start))
		if o.err == nil && o.status < 300 && o.stored+o.dups > 0 {
			s.logAccepted(r.Context(), rt, &o, start)
		}
		if o.err != nil || s.log.Enabled(r.Context(), slog.LevelDebug) {
			s.log.Log(r.Context(), o.level, "webhook", "provider", rt.name, "route", rt.suffix, "status", o.status,
				"envelopes", o.stored, "duplicates", o.dups, "remote", r.RemoteAddr, "err", o.err, "duration", time.Since(start))
		}
		putBuffer(o.body)
	})
}

// The header values of the plain-text answers, shared by every answer: set
// as they are, not allocated per answer. Their capacity is their length, so
// that an append (Header.Add) copies them.
var (
	plainText = []string{"text/plain; charset=utf-8"}[:1:1]
	noSniff   = []string{"nosniff"}[:1:1]
)

// okText is the text of a 200 answer; okAnswer its bytes, written as they
// are (the ResponseWriter has no WriteString, so a string is copied first).
const okText = "ok"

var okAnswer = []byte(okText + "\n")

// serve runs one request through read, verify, map and publish.
func (s *Service) serve(w http.ResponseWriter, r *http.Request, rt *route, start time.Time) (o outcome) {
	defer func() {
		if v := recover(); v != nil {
			o = outcome{status: http.StatusInternalServerError, msg: "internal error",
				err: fmt.Errorf("%s mapper panic: %v", rt.name, v), level: slog.LevelError}
		}
	}()
	if r.Method != http.MethodPost {
		return outcome{status: http.StatusMethodNotAllowed, msg: "method not allowed: use POST", level: slog.LevelDebug}
	}
	limit := rt.limits.MaxBody
	if r.ContentLength > limit {
		return tooLarge(rt, r.ContentLength)
	}
	// The body must arrive before the provider gives up waiting: a client that
	// sends headers and then nothing (or a trickle) is cut off there.
	_ = http.NewResponseController(w).SetReadDeadline(start.Add(rt.limits.Deadline))
	body, reserved, err := s.readBody(r, limit)
	defer func() { s.inflight.Release(reserved); o.body = body }() // a panic's outcome drops the body: not reused
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe) || errors.Is(err, errTooLarge):
			return tooLarge(rt, -1)
		case errors.Is(err, errBusy):
			return outcome{status: http.StatusServiceUnavailable, msg: "busy, retry later",
				err: fmt.Errorf("in-flight body budget of %d bytes spent", s.cfg.MaxInflightBytes), level: slog.LevelWarn}
		case errors.Is(err, os.ErrDeadlineExceeded):
			return outcome{status: http.StatusRequestTimeout, msg: "body not received in time",
				err: fmt.Errorf("read body: %d bytes before the %s deadline", len(body), rt.limits.Deadline), level: slog.LevelInfo}
		}
		return outcome{status: http.StatusBadRequest, msg: "cannot read body", err: fmt.Errorf("read body: %w", err), level: slog.LevelInfo}
	}
	req := &mappers.Request{Route: rt.suffix, Header: r.Header, Body: body, Received: start}
	if err := s.verify(r.Context(), rt, req); err != nil {
		if errors.Is(err, mappers.ErrNoSecret) {
			return outcome{status: http.StatusUnauthorized, msg: "webhook refused: no secret configured for " + rt.name,
				err: fmt.Errorf("%s: %w", rt.name, err), level: slog.LevelWarn}
		}
		return outcome{status: http.StatusUnauthorized, msg: "signature verification failed", err: err, level: slog.LevelWarn}
	}
	res, err := rt.provider.Map(req)
	if err != nil {
		var pe *mappers.ParseError
		if errors.As(err, &pe) {
			msg := "cannot parse payload"
			var cte *mappers.ContentTypeError
			if errors.As(err, &cte) {
				msg += ": " + cte.Hint()
			}
			return outcome{status: http.StatusBadRequest, msg: msg, err: err, level: slog.LevelInfo}
		}
		return outcome{status: http.StatusInternalServerError, msg: "internal error", err: err, level: slog.LevelError}
	}
	// The provider's hang-up must not stop a publish half way: publish every
	// item under the provider's deadline, not the request's context. While
	// the bus cannot take it (a leader election) the request is held and the
	// publish retried until rt.limits.Hold has passed.
	src := itemsSource(res.Items)
	if !s.sources.acquire(src) {
		o = outcome{status: http.StatusServiceUnavailable, msg: "busy, retry later", level: slog.LevelDebug,
			err: fmt.Errorf("%s: %d webhooks of %s in flight already (RELAY_INGEST_MAX_INFLIGHT_PER_SOURCE)", rt.name, s.cfg.MaxInflightPerSource, src)}
		if s.busy.allow(start) {
			o.level = slog.LevelWarn // once a second: a flood would write a line per webhook
		}
		return o
	}
	defer s.sources.release(src)
	deadline := start.Add(rt.limits.Hold)
	ctx, cancel := context.WithDeadline(context.WithoutCancel(r.Context()), deadline)
	defer cancel()
	h := holder{s: s}
	defer h.release()
	for _, it := range res.Items {
		if n := mappers.RedactCredentials(it.Envelope); n > 0 {
			// Counted and named, never shown: the log has no value of them.
			s.log.Info("credentials in a webhook's text replaced before it is stored", "provider", rt.name,
				"msg_id", it.MsgID, "credentials", n, "replaced_with", mappers.RedactedCredential)
		}
		pr, err := h.publish(ctx, it)
		if err != nil {
			o.err = fmt.Errorf("%s delivery %s: %w", rt.name, it.MsgID, err)
			if errors.Is(err, bus.ErrInvalidEnvelope) {
				o.status, o.msg, o.level = http.StatusInternalServerError, "internal error", slog.LevelError
				return o
			}
			o.status, o.msg, o.level = http.StatusServiceUnavailable, "bus unavailable, retry later", slog.LevelWarn
			if errors.Is(err, errHeldFull) {
				o.msg = "busy, retry later"
			}
			return o
		}
		if o.stored+o.dups == 0 {
			o.thread = it.Envelope.Meta.Thread
			if src := it.Envelope.Meta.Source; src != nil {
				o.event, o.delivery = src.Event, src.DeliveryID
			}
		}
		if pr.Duplicate {
			o.dups++
		} else {
			o.stored++
		}
	}
	o.status, o.msg, o.level = http.StatusOK, okText, slog.LevelDebug
	if res.Reply != nil {
		o.reply = res.Reply
		if o.reply.Status != 0 {
			o.status = o.reply.Status
		}
	}
	return o
}

// verify checks the request's signature, in a span of its own when tracing.
func (s *Service) verify(ctx context.Context, rt *route, req *mappers.Request) error {
	if !telemetry.Enabled() {
		return rt.provider.Verify(req)
	}
	_, span := telemetry.Start(ctx, "verify "+rt.name, trace.SpanKindInternal)
	err := rt.provider.Verify(req)
	telemetry.End(span, err)
	return err
}

func tooLarge(rt *route, n int64) outcome {
	size := "the body"
	if n >= 0 {
		size = strconv.FormatInt(n, 10) + " bytes"
	}
	return outcome{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("body over the %d-byte limit", rt.limits.MaxBody),
		err: fmt.Errorf("%s: %s over the limit of %d", rt.name, size, rt.limits.MaxBody), level: slog.LevelWarn}
}

var (
	errTooLarge = errors.New("body over the limit")
	errBusy     = errors.New("in-flight body budget spent")
)

// firstChunk is the memory a request reserves before its first bytes arrive.
const firstChunk = 4 << 10

// readBody reads the whole body, at most limit bytes, reserving its memory
// from the in-flight budget as the bytes arrive: the buffer starts at
// firstChunk (or the declared length, when smaller), or at once at the
// pooled size that holds what the server has already read ahead of the
// request (httpserver.Arrived; at most twice that, and no more than the
// declared length needs), and doubles only when full, so a client holds at
// most twice what it actually sent, never the length it declared. It returns
// what it reserved (to release, also on error) and errBusy when the budget
// cannot cover the next growth. The buffers come from growPool and those a
// body outgrows go back to it; the caller gives the body back with putBuffer
// when nothing uses it any more.
func (s *Service) readBody(r *http.Request, limit int64) (body []byte, reserved int64, err error) {
	known := r.ContentLength >= 0
	size := int64(firstChunk)
	if ahead := 2 * int64(httpserver.Arrived(r)); ahead >= 2*firstChunk {
		size = firstChunk << (bits.Len64(uint64(ahead/firstChunk)) - 1) // the largest pooled size up to ahead
	}
	if known {
		size = min(size, fitting(r.ContentLength))
	}
	size = min(size, limit+1)
	if !s.inflight.TryAcquire(size) {
		return nil, 0, errBusy
	}
	reserved = size
	buf := newBuffer(size)
	for {
		if known && int64(len(buf)) == r.ContentLength {
			return buf, reserved, nil // the server's body reader stops here
		}
		if len(buf) == cap(buf) {
			if int64(len(buf)) > limit {
				return nil, reserved, errTooLarge
			}
			// Doubling keeps the buffer one of growPool's sizes, also past a
			// declared length: it reserves no more than twice what arrived.
			next := min(max(2*int64(cap(buf)), firstChunk), limit+1)
			if !s.inflight.TryAcquire(next - int64(cap(buf))) {
				return buf, reserved, errBusy
			}
			reserved += next - int64(cap(buf))
			grown := newBuffer(next)[:len(buf)]
			copy(grown, buf)
			putBuffer(buf)
			buf = grown
		}
		n, err := r.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			if int64(len(buf)) > limit {
				return nil, reserved, errTooLarge
			}
			return buf, reserved, nil
		}
		if err != nil {
			return buf, reserved, err
		}
	}
}

// growPool holds body buffers of firstChunk << i bytes, those bodies outgrew
// while they arrived and those of answered requests, so that reading a body
// allocates nothing once the pool is warm.
var growPool [maxPooledShift + 1]sync.Pool

// maxPooledShift bounds the pooled sizes at firstChunk << 8 (1 MiB).
const maxPooledShift = 8

// boxPool holds the empty *[]byte boxes that carry buffers in growPool, so
// that giving a buffer back allocates no box.
var boxPool sync.Pool

// newBuffer is an empty buffer of capacity size: from growPool when size is
// one of its sizes, else new.
func newBuffer(size int64) []byte {
	if i, ok := poolIndex(size); ok {
		if b, _ := growPool[i].Get().(*[]byte); b != nil {
			buf := (*b)[:0]
			*b = nil
			boxPool.Put(b)
			return buf
		}
	}
	return make([]byte, 0, size)
}

// putBuffer gives buf to growPool when it has one of its sizes (nil does
// nothing). Nothing may use buf afterwards.
func putBuffer(buf []byte) {
	if i, ok := poolIndex(int64(cap(buf))); ok {
		b, _ := boxPool.Get().(*[]byte)
		if b == nil {
			b = new([]byte)
		}
		*b = buf
		growPool[i].Put(b)
	}
}

// fitting is the size of the buffer a body of n bytes fills: n itself up to
// firstChunk, else the smallest pooled size that holds n (n beyond them).
func fitting(n int64) int64 {
	if n <= firstChunk {
		return n
	}
	size := int64(firstChunk) << bits.Len64(uint64((n-1)/firstChunk))
	if _, ok := poolIndex(size); !ok {
		return n
	}
	return size
}

// poolIndex is i where size is firstChunk << i, if it is a pooled size.
func poolIndex(size int64) (int, bool) {
	if size < firstChunk || size%firstChunk != 0 {
		return 0, false
	}
	n := size / firstChunk
	if n&(n-1) != 0 {
		return 0, false
	}
	i := bits.TrailingZeros64(uint64(n))
	return i, i <= maxPooledShift
}
