package manifest

import (
	"encoding/json"
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/throttle-rl/throttle/envoy"
)

// EnvoyFilter is an Istio networking.istio.io/v1alpha3 EnvoyFilter, with the
// fields Throttle's filters use (any other field fails the strict decode).
// Patch values stay raw: Patches decodes them into Envoy's protos.
type EnvoyFilter struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		WorkloadSelector struct {
			Labels map[string]string `json:"labels"`
		} `json:"workloadSelector"`
		ConfigPatches []EnvoyConfigPatch `json:"configPatches"`
	} `json:"spec"`
}

// EnvoyConfigPatch is one of an EnvoyFilter's configPatches.
type EnvoyConfigPatch struct {
	ApplyTo string `json:"applyTo"`
	Match   struct {
		Context  string `json:"context"`
		Listener *struct {
			FilterChain struct {
				Filter struct {
					Name      string `json:"name"`
					SubFilter struct {
						Name string `json:"name"`
					} `json:"subFilter"`
				} `json:"filter"`
			} `json:"filterChain"`
		} `json:"listener,omitempty"`
		RouteConfiguration *struct {
			Vhost struct {
				Name  string `json:"name"`
				Route struct {
					Action string `json:"action"`
				} `json:"route"`
			} `json:"vhost"`
		} `json:"routeConfiguration,omitempty"`
	} `json:"match"`
	Patch struct {
		Operation string          `json:"operation"`
		Value     json.RawMessage `json:"value"`
	} `json:"patch"`
}

// EnvoyPatches are the patch values of an EnvoyFilter decoded into the Envoy
// protos Istio merges them as, in order of their patches.
type EnvoyPatches struct {
	Clusters    []*clusterv3.Cluster
	HTTPFilters []*hcmv3.HttpFilter
	// VirtualHosts are MERGE fragments (no name or domains): only their
	// rate_limits are validated.
	VirtualHosts []*routev3.VirtualHost
}

// Patches decodes every patch value strictly (envoy.Decode) and validates it
// (envoy.Validate); an applyTo it does not know is an error.
func (f *EnvoyFilter) Patches() (*EnvoyPatches, error) {
	var ps EnvoyPatches
	for i, p := range f.Spec.ConfigPatches {
		where := fmt.Sprintf("EnvoyFilter %s configPatches[%d] (%s)", f.Name, i, p.ApplyTo)
		switch p.ApplyTo {
		case "CLUSTER":
			var c clusterv3.Cluster
			if err := decodeValid(p.Patch.Value, &c); err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
			ps.Clusters = append(ps.Clusters, &c)
		case "HTTP_FILTER":
			var hf hcmv3.HttpFilter
			if err := decodeValid(p.Patch.Value, &hf); err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
			ps.HTTPFilters = append(ps.HTTPFilters, &hf)
		case "VIRTUAL_HOST":
			var vh routev3.VirtualHost
			if err := envoy.Decode(p.Patch.Value, &vh); err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
			for j, lim := range vh.GetRateLimits() {
				if err := envoy.Validate(lim); err != nil {
					return nil, fmt.Errorf("%s rate_limits[%d]: %w", where, j, err)
				}
			}
			ps.VirtualHosts = append(ps.VirtualHosts, &vh)
		default:
			return nil, fmt.Errorf("%s: applyTo %q is not decoded by manifest.Patches; add it", where, p.ApplyTo)
		}
	}
	return &ps, nil
}

func decodeValid(data []byte, m proto.Message) error {
	if err := envoy.Decode(data, m); err != nil {
		return err
	}
	return envoy.Validate(m)
}
