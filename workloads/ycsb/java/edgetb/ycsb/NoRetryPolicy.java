package edgetb.ycsb;

import com.datastax.oss.driver.api.core.ConsistencyLevel;
import com.datastax.oss.driver.api.core.context.DriverContext;
import com.datastax.oss.driver.api.core.retry.RetryDecision;
import com.datastax.oss.driver.api.core.retry.RetryPolicy;
import com.datastax.oss.driver.api.core.servererrors.CoordinatorException;
import com.datastax.oss.driver.api.core.servererrors.WriteType;
import com.datastax.oss.driver.api.core.session.Request;

/**
 * A timeout, an unavailable or an aborted request is reported as it happened, never
 * retried: a measurement counts what the network did to one attempt (the sweep's writes
 * use the Python driver's FallthroughRetryPolicy for the same reason).
 */
@SuppressWarnings("deprecation") // the abstract methods are the deprecated ones
public class NoRetryPolicy implements RetryPolicy {
  public NoRetryPolicy(DriverContext context, String profileName) {}

  @Override
  public RetryDecision onReadTimeout(
      Request request, ConsistencyLevel cl, int blockFor, int received, boolean dataPresent,
      int retryCount) {
    return RetryDecision.RETHROW;
  }

  @Override
  public RetryDecision onWriteTimeout(
      Request request, ConsistencyLevel cl, WriteType writeType, int blockFor, int received,
      int retryCount) {
    return RetryDecision.RETHROW;
  }

  @Override
  public RetryDecision onUnavailable(
      Request request, ConsistencyLevel cl, int required, int alive, int retryCount) {
    return RetryDecision.RETHROW;
  }

  @Override
  public RetryDecision onRequestAborted(Request request, Throwable error, int retryCount) {
    return RetryDecision.RETHROW;
  }

  @Override
  public RetryDecision onErrorResponse(
      Request request, CoordinatorException error, int retryCount) {
    return RetryDecision.RETHROW;
  }

  @Override
  public void close() {}
}
