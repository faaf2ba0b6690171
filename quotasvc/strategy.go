package quotasvc

import (
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The strategies Throttle assigns a bucket, and the actions that carry them.

// firstStrategy is what a bucket is assigned when it subscribes, at once:
// its blanket rule, or, for a shared limit, a newcomer's grant until the next
// reassignment counts it.
func (s *Server) firstStrategy(b *sub) *typev3.RateLimitStrategy {
	if b.group == nil {
		return blanketFor(b.kind)
	}
	return tokenBucket(s.newcomers(b.group, b.group.last)[b])
}

// blanketFor is the blanket rule of a kind that shares nothing.
func blanketFor(kind string) *typev3.RateLimitStrategy {
	rule := typev3.RateLimitStrategy_ALLOW_ALL
	if kind == "deny" {
		rule = typev3.RateLimitStrategy_DENY_ALL
	}
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}}
}

// tokenBucket is the strategy of a grant: a token bucket, or deny all for a
// grant of no tokens.
func tokenBucket(g grant) *typev3.RateLimitStrategy {
	if g.tokens == 0 {
		return blanketFor("deny")
	}
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens:     g.max,
		TokensPerFill: wrapperspb.UInt32(g.tokens),
		FillInterval:  durationpb.New(g.fill),
	}}}
}

// assignment is the action assigning strategy to bucket for ttl.
func assignment(bucket *rlqsv3.BucketId, strategy *typev3.RateLimitStrategy, ttl time.Duration) *action {
	return &action{
		BucketId: bucket,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(ttl),
				RateLimitStrategy:    strategy,
			},
		},
	}
}

// abandon is the action telling the instance to forget bucket.
func abandon(bucket *rlqsv3.BucketId) *action {
	return &action{
		BucketId:     bucket,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}},
	}
}

func sameStrategy(a, b *typev3.RateLimitStrategy) bool { return proto.Equal(a, b) }

// strategyName is a strategy's label in throttle_rlqs_actions_total.
func strategyName(s *typev3.RateLimitStrategy) string {
	if s.GetTokenBucket() != nil {
		return "token_bucket"
	}
	if s.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL {
		return "deny_all"
	}
	return "allow_all"
}
