/**
 * The seed's `./user-credentials-store`: the legacy (v1) envelope of a project environment value.
 * `parseStoredProjectEnv` accepts exactly `{"v": 1, "kind": "project-env", "projectId", "key", "value"}` with string
 * fields and throws on anything else (the seed turns the throw into `value_unavailable`; docs/protocol.md section 4).
 */

export interface StoredProjectEnv {
  projectId: string;
  key: string;
  value: string;
}

const KEYS = ["v", "kind", "projectId", "key", "value"];

export function parseStoredProjectEnv(raw: string): StoredProjectEnv {
  const parsed: unknown = JSON.parse(raw);
  if (
    parsed === null ||
    typeof parsed !== "object" ||
    Array.isArray(parsed) ||
    Object.keys(parsed).length !== KEYS.length ||
    !KEYS.every((key) => Object.hasOwn(parsed, key))
  ) {
    throw new Error("stored project environment value is not a v1 envelope");
  }
  const envelope = parsed as Record<string, unknown>;
  if (
    envelope["v"] !== 1 ||
    envelope["kind"] !== "project-env" ||
    typeof envelope["projectId"] !== "string" ||
    typeof envelope["key"] !== "string" ||
    typeof envelope["value"] !== "string"
  ) {
    throw new Error("stored project environment value is not a v1 envelope");
  }
  return { projectId: envelope["projectId"], key: envelope["key"], value: envelope["value"] };
}
