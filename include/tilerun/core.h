/* core.h: tilerun's core types in one include: status, device, dtype, tensor spec, value. */
#ifndef TILERUN_CORE_H_
#define TILERUN_CORE_H_

#include "tilerun/device.h"
#include "tilerun/dtype.h"
#include "tilerun/hash.h"
#include "tilerun/status.h"
#include "tilerun/tensor_spec.h"
#include "tilerun/value.h"

#endif /* TILERUN_CORE_H_ */
