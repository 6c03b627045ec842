/**
 * The seed's `./secrets`: the host's master key. Here it is the key the harness configured (the public test key
 * unless a `reset` sent `masterKeyHex`): receipts are MACed and values sealed under it.
 */

import { masterKey as hostMasterKey } from "../../../host/sealing.js";
import { host } from "../runtime.js";

export function masterKey(): Buffer {
  return hostMasterKey(host());
}
