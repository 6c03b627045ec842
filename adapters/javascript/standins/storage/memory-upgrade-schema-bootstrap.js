// Stand-in for dd-flow's `storage/memory-upgrade-schema-bootstrap.js` (imported by the seed; not shipped).
//
// What the seed needs of it: `bootstrapMemoryUpgradeSchema(runHome, resourceHome, permitId)`, called only when a
// request binds `bootstrap_schema: "memory-upgrade@1"`. The kit's requests never do (the model leaves the schema
// bootstrap out), so it is never called; if it were, it refuses rather than pretend.
import { AppError } from "seed-root:shared/errors.js";

export function bootstrapMemoryUpgradeSchema() {
    throw new AppError("unsupported_schema_bootstrap", "the kit does not model the memory-upgrade schema bootstrap", 2,
        { reason: "unsupported_schema_bootstrap" });
}
