// SPDX-License-Identifier: MIT
// See ../../README.md. Only pointed to.
#pragma once
namespace gloo::transport {
class Device;
class UnboundBuffer;
} // namespace gloo::transport
