package outbound

import (
	"context"
	"time"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/story"
)

// publishPosted records a post on task.posted (story.SubjectPosted): where
// it went, the provider's id and link, and how long the call took, so the
// story of a webhook ends with the comment it produced. Best effort: a
// failure is logged, the post stands. One record per idempotency key.
func (s *Service) publishPosted(ctx context.Context, e *envelope.Envelope, t *envelope.Target, key string, res result, took time.Duration) {
	r := story.NewRecord(&e.Meta, "posted to "+t.String(), story.MetaPosted, story.Posted{Target: t.String(),
		ProviderID: res.id, URL: res.url, DurationMS: took.Milliseconds(), Existing: res.existing, Key: key})
	if _, err := s.bus.Publish(ctx, story.SubjectPosted, r, bus.WithMsgID("posted:"+key)); err != nil {
		s.log.Warn("post record not published", "key", key, "err", err)
	}
}
