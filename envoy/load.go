package envoy

import (
	"errors"
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"

	// The extensions named by "@type" in the configs of this folder. protojson
	// resolves an Any through the global registry, so each must be linked in.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/matching/common_inputs/network/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// LoadBootstrap decodes an Envoy bootstrap file (YAML or JSON) strictly and
// validates it, typed_config contents included. It is what Envoy does at start,
// minus the network.
func LoadBootstrap(data []byte) (*bootstrapv3.Bootstrap, error) {
	var b bootstrapv3.Bootstrap
	if err := Decode(data, &b); err != nil {
		return nil, err
	}
	if err := Validate(&b); err != nil {
		return nil, err
	}
	return &b, nil
}

// Decode decodes YAML (or JSON) into m with Envoy's rules: field names as in the
// .proto files (or their JSON names), no unknown fields, every Any resolved.
func Decode(data []byte, m proto.Message) error {
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return fmt.Errorf("yaml: %w", err)
	}
	if err := protojson.Unmarshal(j, m); err != nil {
		return fmt.Errorf("decode %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return nil
}

// Validate runs the protoc-gen-validate rules of m and of every message below it,
// including the messages packed in Any fields, which ValidateAll alone skips.
func Validate(m proto.Message) error {
	return validate(m.ProtoReflect(), string(m.ProtoReflect().Descriptor().FullName()))
}

type validatorAll interface{ ValidateAll() error }

// validate runs m's own rules, which cover the messages below it except what
// Any fields pack, then validates each packed message the same way.
func validate(m protoreflect.Message, path string) error {
	var errs []error
	if v, ok := m.Interface().(validatorAll); ok {
		if err := v.ValidateAll(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
		}
	}
	errs = append(errs, validateAnys(m, path))
	return errors.Join(errs...)
}

// validateAnys finds the Any fields below m and validates what they pack.
func validateAnys(m protoreflect.Message, path string) error {
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		return validate(inner.ProtoReflect(), path+"("+string(inner.ProtoReflect().Descriptor().FullName())+")")
	}
	var errs []error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := path + "." + string(fd.Name())
		switch {
		case fd.IsList() && fd.Kind() == protoreflect.MessageKind:
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				errs = append(errs, validateAnys(l.Get(i).Message(), fmt.Sprintf("%s[%d]", name, i)))
			}
		case fd.IsMap() && fd.MapValue().Kind() == protoreflect.MessageKind:
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				errs = append(errs, validateAnys(mv.Message(), fmt.Sprintf("%s[%v]", name, k.Interface())))
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Kind() == protoreflect.MessageKind:
			errs = append(errs, validateAnys(v.Message(), name))
		}
		return true
	})
	return errors.Join(errs...)
}

// EndpointAddrs returns the host:port of every endpoint of cluster c, in
// order.
func EndpointAddrs(c *clusterv3.Cluster) []string {
	var out []string
	for _, e := range c.GetLoadAssignment().GetEndpoints() {
		for _, le := range e.GetLbEndpoints() {
			sa := le.GetEndpoint().GetAddress().GetSocketAddress()
			out = append(out, fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue()))
		}
	}
	return out
}
