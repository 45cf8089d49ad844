"use strict";
var __createBinding = (this && this.__createBinding) || (Object.create ? (function(o, m, k, k2) {
    if (k2 === undefined) k2 = k;
    var desc = Object.getOwnPropertyDescriptor(m, k);
    if (!desc || ("get" in desc ? !m.__esModule : desc.writable || desc.configurable)) {
      desc = { enumerable: true, get: function() { return m[k]; } };
    }
    Object.defineProperty(o, k2, desc);
}) : (function(o, m, k, k2) {
    if (k2 === undefined) k2 = k;
    o[k2] = m[k];
}));
var __exportStar = (this && this.__exportStar) || function(m, exports) {
    for (var p in m) if (p !== "default" && !Object.prototype.hasOwnProperty.call(exports, p)) __createBinding(exports, m, p);
};
Object.defineProperty(exports, "__esModule", { value: true });
exports.fastifyIdempotency = exports.expressIdempotencyErrors = exports.expressIdempotency = exports.defaultCaller = exports.defaultFingerprint = exports.DEFAULT_RELEASED = exports.DEFAULT_REPLAY_HEADERS = exports.transaction = exports.applyBatch = exports.applyMessage = exports.withLease = exports.Claim = exports.status = exports.extend = exports.fail = exports.complete = exports.claim = void 0;
var claim_1 = require("./claim");
Object.defineProperty(exports, "claim", { enumerable: true, get: function () { return claim_1.claim; } });
Object.defineProperty(exports, "complete", { enumerable: true, get: function () { return claim_1.complete; } });
Object.defineProperty(exports, "fail", { enumerable: true, get: function () { return claim_1.fail; } });
Object.defineProperty(exports, "extend", { enumerable: true, get: function () { return claim_1.extend; } });
Object.defineProperty(exports, "status", { enumerable: true, get: function () { return claim_1.status; } });
Object.defineProperty(exports, "Claim", { enumerable: true, get: function () { return claim_1.Claim; } });
__exportStar(require("./errors"), exports);
var lease_1 = require("./lease");
Object.defineProperty(exports, "withLease", { enumerable: true, get: function () { return lease_1.withLease; } });
var inbox_1 = require("./inbox");
Object.defineProperty(exports, "applyMessage", { enumerable: true, get: function () { return inbox_1.applyMessage; } });
Object.defineProperty(exports, "applyBatch", { enumerable: true, get: function () { return inbox_1.applyBatch; } });
Object.defineProperty(exports, "transaction", { enumerable: true, get: function () { return inbox_1.transaction; } });
var http_1 = require("./http");
Object.defineProperty(exports, "DEFAULT_REPLAY_HEADERS", { enumerable: true, get: function () { return http_1.DEFAULT_REPLAY_HEADERS; } });
Object.defineProperty(exports, "DEFAULT_RELEASED", { enumerable: true, get: function () { return http_1.DEFAULT_RELEASED; } });
Object.defineProperty(exports, "defaultFingerprint", { enumerable: true, get: function () { return http_1.defaultFingerprint; } });
Object.defineProperty(exports, "defaultCaller", { enumerable: true, get: function () { return http_1.defaultCaller; } });
var express_1 = require("./express");
Object.defineProperty(exports, "expressIdempotency", { enumerable: true, get: function () { return express_1.expressIdempotency; } });
Object.defineProperty(exports, "expressIdempotencyErrors", { enumerable: true, get: function () { return express_1.expressIdempotencyErrors; } });
var fastify_1 = require("./fastify");
Object.defineProperty(exports, "fastifyIdempotency", { enumerable: true, get: function () { return fastify_1.fastifyIdempotency; } });
