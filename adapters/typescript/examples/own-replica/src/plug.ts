// The glue: the kit runs this module (`envreplica-ts-adapter --impl src/plug.ts`) and calls createReplica(host).
import type { Host, Replica } from "@envreplica/adapter-kit";
import { errorKind } from "@envreplica/adapter-kit/host";

import { OwnReplica, ReadyTimeout } from "./replica.js";

export function createReplica(host: Host): Replica {
  const replica = new OwnReplica(host);
  return {
    begin: (frame, epochs, orgId) => replica.begin(frame, epochs, orgId),
    applyPage: (frame, reader) => replica.applyPage(frame, reader),
    applyDelivery: (frame, reader) => replica.applyDelivery(frame, reader),
    complete: (frame) => replica.complete(frame),
    closeGate: () => replica.closeGate(),
    readStatus: () => replica.readStatus(),
    readSnapshot: (projectIds) => replica.readSnapshot(projectIds),
    listReceipts: () => replica.listReceipts(),
    awaitReady: (timeoutMs) => replica.awaitReady(timeoutMs),
    isReadyTimeout: (error) => error instanceof ReadyTimeout,
    exportState: () => replica.exportState(),
    empty: () => replica.empty(),
    reopen: () => replica.reopen(),
    close: () => replica.close(),
    errorKind: (error) => errorKind(error),
    crashesAfterCommit: true, // every write goes through TestDatabase.write, which reports its commit
  };
}
