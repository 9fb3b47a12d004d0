package toolrunner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/tools"
)

// ResultBucket returns the object store of results too large for one bus
// message, for a bus prefix (tools.ResultBucket).
func ResultBucket(prefix string) string { return tools.ResultBucket(prefix) }

// resultMargin is the room a result keeps below the bus's max payload for
// the call record around it and the message's headers.
const resultMargin = 64 << 10

// openResults creates or opens the result object store; its objects live as
// long as the call records.
func (s *Service) openResults(ctx context.Context) error {
	os, err := s.bus.JetStream().CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      ResultBucket(s.bus.Prefix()),
		Description: "relay tool runner: results too large for one bus message, whole",
		TTL:         s.cfg.CallRecordTTL,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return fmt.Errorf("open object store %s: %w", ResultBucket(s.bus.Prefix()), err)
	}
	s.results = os
	return nil
}

// fit returns reply when it fits one bus message. A larger one is stored
// whole in the result object store and replaced by a reply that carries
// the start of its text, a note saying so and where the whole is
// (tools.MetaResultObject); when it cannot be stored, by the start and a note
// that the rest is lost. Either way the reply keeps the call's status: the
// call ran.
func (s *Service) fit(ctx context.Context, call, reply *envelope.Envelope) (*envelope.Envelope, error) {
	raw, err := reply.Marshal()
	if err != nil {
		return nil, bus.Permanent(err)
	}
	limit := int(s.bus.Conn().MaxPayload()) - resultMargin
	if len(raw) <= limit {
		return reply, nil
	}
	name := "tool-result-" + call.ID
	var stored error
	if s.results == nil {
		stored = errors.New("no object store")
	} else {
		// Any failure cuts rather than retries: the call ran, and a
		// redelivery would find it claimed and not run it again.
		_, stored = s.results.Put(ctx, jetstream.ObjectMeta{Name: name, Description: "reply to tool call " + call.ToolCall.ID}, bytes.NewReader(raw))
	}
	res := reply.ToolCall.Result
	text, _ := res["text"].(string)
	if text == "" {
		text = reply.Content
	}
	// The text is carried twice (content and result.text): a quarter of the
	// room each leaves plenty for the rest.
	head := cutUTF8(text, limit/4)
	var note string
	if stored == nil {
		note = fmt.Sprintf("[relay: the tool ran; its result of %d bytes is more than one bus message carries (%d), so it is stored whole in object store %s as %s and shown here cut to its first %d bytes]",
			len(raw), limit, ResultBucket(s.bus.Prefix()), name, len(head))
	} else {
		s.log.Warn("tool result too large for the bus and not stored; cut", "envelope_id", call.ID, "bytes", len(raw), "err", stored)
		note = fmt.Sprintf("[relay: the tool ran; its result of %d bytes is more than one bus message carries (%d) and could not be stored, so it is cut to its first %d bytes and the rest is lost]",
			len(raw), limit, len(head))
	}
	small := map[string]any{"text": head + "\n\n" + note, "cut": true, "bytes": len(raw)}
	for _, k := range []string{"status", "duration_ms", "redacted", "error", "sampling_tokens", "cancelled_by"} {
		if v, ok := res[k]; ok {
			small[k] = v
		}
	}
	out := s.envelopeFor(call, head+"\n\n"+note, small, reply.Meta.GetString("audit_id"))
	if stored == nil {
		out.Meta.Set(tools.MetaResultObject, map[string]any{"bucket": ResultBucket(s.bus.Prefix()), "name": name, "bytes": len(raw)})
	}
	return out, nil
}

// cutUTF8 is s cut to at most n bytes, never inside a character.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
