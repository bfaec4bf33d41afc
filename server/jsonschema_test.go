package server

import (
	"encoding/base64"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// validateJSON checks v, a decoded JSON value, against sc, a schema of
// the OpenAPI document doc (decoded), with the keywords the document
// uses: $ref, allOf, oneOf, type, properties, additionalProperties,
// required, items, enum, format date-time, contentEncoding base64,
// minimum, maximum, minItems and maxItems. It returns the first mismatch,
// naming where in v it is.
func validateJSON(doc map[string]any, sc any, v any, at string) error {
	m, ok := sc.(map[string]any)
	if !ok {
		return fmt.Errorf("%s: schema %v is not an object", at, sc)
	}
	if r, ok := m["$ref"].(string); ok {
		name, ok := strings.CutPrefix(r, "#/components/schemas/")
		target := doc["components"].(map[string]any)["schemas"].(map[string]any)[name]
		if !ok || target == nil {
			return fmt.Errorf("%s: unresolved reference %s", at, r)
		}
		if err := validateJSON(doc, target, v, at); err != nil {
			return err
		}
	}
	if all, ok := m["allOf"].([]any); ok {
		for _, s := range all {
			if err := validateJSON(doc, s, v, at); err != nil {
				return err
			}
		}
	}
	if alts, ok := m["oneOf"].([]any); ok {
		n := 0
		for _, s := range alts {
			if validateJSON(doc, s, v, at) == nil {
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("%s: %d of the oneOf alternatives match, want 1", at, n)
		}
	}
	if enum, ok := m["enum"].([]any); ok && !slices.Contains(enum, v) {
		return fmt.Errorf("%s: %v is none of %v", at, v, enum)
	}
	switch m["type"] {
	case "object":
		o, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: %v is not an object", at, v)
		}
		return validateObject(doc, m, o, at)
	case "array":
		a, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: %v is not an array", at, v)
		}
		if n, ok := m["minItems"].(float64); ok && float64(len(a)) < n {
			return fmt.Errorf("%s: %d items, fewer than %v", at, len(a), n)
		}
		if n, ok := m["maxItems"].(float64); ok && float64(len(a)) > n {
			return fmt.Errorf("%s: %d items, more than %v", at, len(a), n)
		}
		for i, e := range a {
			if err := validateJSON(doc, m["items"], e, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	case "string":
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s: %v is not a string", at, v)
		}
		if m["format"] == "date-time" {
			if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
				return fmt.Errorf("%s: %q is not a date-time", at, s)
			}
		}
		if m["contentEncoding"] == "base64" {
			if _, err := base64.StdEncoding.DecodeString(s); err != nil {
				return fmt.Errorf("%s: %q is not base64", at, s)
			}
		}
	case "integer":
		f, ok := v.(float64)
		if !ok || f != math.Trunc(f) {
			return fmt.Errorf("%s: %v is not an integer", at, v)
		}
		if n, ok := m["minimum"].(float64); ok && f < n {
			return fmt.Errorf("%s: %v below %v", at, f, n)
		}
		if n, ok := m["maximum"].(float64); ok && f > n {
			return fmt.Errorf("%s: %v above %v", at, f, n)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s: %v is not a boolean", at, v)
		}
	case nil:
		// Constraints only (allOf parts, alternatives).
		switch x := v.(type) {
		case map[string]any:
			return validateObject(doc, m, x, at)
		case []any:
			if m["items"] != nil {
				for i, e := range x {
					if err := validateJSON(doc, m["items"], e, fmt.Sprintf("%s[%d]", at, i)); err != nil {
						return err
					}
				}
			}
		}
	default:
		return fmt.Errorf("%s: unknown type %v", at, m["type"])
	}
	return nil
}

// validateObject checks an object's members: required ones present, each
// against its property's schema, others refused where
// additionalProperties is false.
func validateObject(doc, m map[string]any, o map[string]any, at string) error {
	req, _ := m["required"].([]any)
	for _, r := range req {
		if _, ok := o[r.(string)]; !ok {
			return fmt.Errorf("%s: required %s missing", at, r)
		}
	}
	props, _ := m["properties"].(map[string]any)
	for k, e := range o {
		if p, ok := props[k]; ok {
			if err := validateJSON(doc, p, e, at+"."+k); err != nil {
				return err
			}
			continue
		}
		switch ap := m["additionalProperties"].(type) {
		case bool:
			if !ap {
				return fmt.Errorf("%s: %s is not a property", at, k)
			}
		case map[string]any:
			if err := validateJSON(doc, ap, e, at+"."+k); err != nil {
				return err
			}
		}
	}
	return nil
}
