// SPDX-License-Identifier: MIT
// See ../../README.md: nothing from this header is used.
#pragma once
