#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Converts the OpenAPI document (YAML) into a C source file holding it as
compact JSON with sorted keys (yaml.safe_load, refusing repeated keys):
cp_openapi_json and cp_openapi_json_len
(controlplane/api/openapi_doc.h).

Usage: openapi_to_c.py <openapi.yaml> <output.c>
Fails (exit 1, message on stderr) when PyYAML is missing, the YAML does not
parse, repeats a key, or holds something JSON cannot (dates, NaN): the build stops there.
"""
import json
import os
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: openapi_to_c.py <openapi.yaml> <output.c>")
    src, out = sys.argv[1], sys.argv[2]
    try:
        import yaml
    except ImportError:
        sys.exit("openapi_to_c.py: PyYAML is missing (Debian: apt-get install python3-yaml; see scripts/deps)")
    class StrictLoader(yaml.SafeLoader):
        """safe_load that refuses a key repeated in one mapping (YAML keeps the last silently)."""

        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}",
                                                            key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep)

    try:
        with open(src, encoding="utf-8") as f:
            doc = yaml.load(f, Loader=StrictLoader)
        if not isinstance(doc, dict) or "openapi" not in doc or not isinstance(doc.get("paths"), dict):
            raise ValueError("not an OpenAPI document (no 'openapi' or 'paths')")
        text = json.dumps(doc, separators=(",", ":"), sort_keys=True, allow_nan=False)
    except (OSError, yaml.YAMLError, TypeError, ValueError) as e:
        sys.exit(f"openapi_to_c.py: {src}: {e}")

    data = text.encode("ascii") + b"\0"
    lines = ["/* Generated from proto/openapi.yaml by cmake/openapi_to_c.py. Do not edit. */",
             '#include "api/openapi_doc.h"', "", "const char cp_openapi_json[] = {"]
    for i in range(0, len(data), 16):
        lines.append("        " + " ".join(f"0x{b:02x}," for b in data[i:i + 16]))
    lines += ["};", f"const size_t cp_openapi_json_len = {len(data) - 1};", ""]

    tmp = out + ".tmp"
    with open(tmp, "w", encoding="ascii") as f:
        f.write("\n".join(lines))
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
