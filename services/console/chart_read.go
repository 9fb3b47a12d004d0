package console

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// cursor is how far a chart has read a stream's messages on some subjects:
// the charts that need the messages themselves (not counts) read each
// message once, from where the last refresh stopped, so an open overview
// costs, per refresh, what was stored since, and the first view after a
// restart reads the chart's reach back from the stream.
type cursor struct {
	seq  uint64    // the last sequence read; 0 before the first read
	time time.Time // when the message at seq was stored, when known
}

// readBatch is how many messages one fetch asks for.
const readBatch = 512

// read calls fn for each message of stream on subjects (absolute) after the
// cursor, or from the time from on the first read (and when the cursor
// is older: no one looked for a while), up to those stored when
// it starts, oldest first, and moves the cursor past them (also past the
// ones read when ctx ends early, so the next refresh goes on from there).
// The messages come from an ephemeral consumer in memory that reads no
// acks, deleted at once (its inactivity threshold removes it otherwise).
func (c *cursor) read(ctx context.Context, js jetstream.JetStream, stream string, subjects []string, from time.Time, headersOnly bool, fn func(jetstream.Msg, *jetstream.MsgMetadata)) error {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", stream, err)
	}
	last := st.CachedInfo().State.LastSeq
	if last <= c.seq {
		return nil
	}
	cfg := jetstream.ConsumerConfig{
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       c.seq + 1,
		FilterSubjects:    subjects,
		AckPolicy:         jetstream.AckNonePolicy,
		HeadersOnly:       headersOnly,
		MemoryStorage:     true,
		InactiveThreshold: 5 * time.Second,
	}
	if c.seq == 0 || c.time.Before(from) {
		cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, 0, &from
	}
	cons, err := js.CreateConsumer(ctx, stream, cfg)
	if err != nil {
		return fmt.Errorf("read %s: %w", stream, err)
	}
	name := cons.CachedInfo().Name
	defer func() { _ = js.DeleteConsumer(context.WithoutCancel(ctx), stream, name) }()
	pending := int(cons.CachedInfo().NumPending)
	if pending == 0 {
		// Nothing on these subjects up to the consumer's creation, which
		// came after the stream's last sequence was asked.
		c.seq = last
		return nil
	}
	for pending > 0 {
		batch, err := cons.Fetch(min(pending, readBatch), jetstream.FetchContext(ctx))
		if err != nil {
			return fmt.Errorf("read %s: %w", stream, err)
		}
		for msg := range batch.Messages() {
			md, err := msg.Metadata()
			if err != nil {
				return fmt.Errorf("read %s: %w", stream, err)
			}
			fn(msg, md)
			c.seq, c.time = md.Sequence.Stream, md.Timestamp
			pending--
		}
		if err := batch.Error(); err != nil {
			return fmt.Errorf("read %s: %w", stream, err)
		}
	}
	return nil
}
